"""A password written in the broker address (``nats://owner:PASS@host``) is used to connect
and shown nowhere: not in the relay's, the checker's, ``rocketbox status``'s or
``rocketbox broker-export``'s output, not in a log line, not in the
``rocketbox_broker_state`` table, not in an error, not in ``repr(outbox)``.

The attack is real: a nats-server that requires the owner's password
(tests/support/nats_server.py with an accounts config), the real ``rocketbox`` processes,
a wrong password the server refuses, an address nobody answers. The owner's work (a row
relayed with the password in the address) succeeds in the same tests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings, migrate
from outbox.errors import ConfigurationError
from outbox.models import broker_state_table
from outbox.publish import publish
from outbox.status import read_status
from outbox.targets.address import BrokerAddressError, parse_broker_address, redacted_address
from tests.outbox.cli.cli_process_support import (
    LineCollector,
    rocketbox_process,
    run_rocketbox,
    terminate,
)
from tests.support import free_port, wait_until
from tests.support.nats_server import NatsServer, start_nats
from tests.support.servers import ServerUnavailable
from tests.targets.nats.nats_support import create_stream, stored

#: the owner's password, and one an attacker guesses; neither may ever be shown
PASSWORD = "pw-" + secrets.token_hex(8)
WRONG = "guess-" + secrets.token_hex(8)
STREAM, TOPIC = "SECRETS", "secret-orders"


@pytest.fixture(scope="module")
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """nats-server with JetStream whose account wants ``owner``'s password (a ``probe``
    user without one lets the fixture's readiness ping in, in the same account)."""
    conf = tmp_path_factory.mktemp("nats-auth") / "auth.conf"
    conf.write_text("accounts {\n  APP {\n    jetstream: enabled\n    users: [\n"
                    f'      {{user: owner, password: "{PASSWORD}"}},\n'
                    '      {user: probe, password: "probe"}\n    ]\n  }\n}\n'
                    "no_auth_user: probe\n")
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(start_nats(extra=("-c", str(conf))))
        except ServerUnavailable as exc:
            if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
                pytest.fail(f"{exc} (CI=true, so a missing server is a failure)", pytrace=False)
            pytest.skip(str(exc))
        yield server


def _address(server: NatsServer, password: str = PASSWORD) -> str:
    return f"nats://owner:{password}@{server.host}:{server.port}"


def _shown(server: NatsServer) -> str:
    return f"nats://owner:***@{server.host}:{server.port}"


def _no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text and WRONG not in text, text


def _state_rows(url: str) -> list[tuple[str, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(str(v) for v in row)
                    for row in conn.execute(select(broker_state_table))]
    finally:
        engine.dispose()


def test_one_function_redacts_every_kind() -> None:
    assert redacted_address("amqp://user:p%40ss@host:5672/vh?exchange=x") == \
        "amqp://user:***@host:5672/vh?exchange=x"
    assert redacted_address("nats://user:pass@h1:4222,h2:4222") == "nats://user:***@h1:4222,h2:4222"
    assert redacted_address("amqps://user@host:5671") == "amqps://user@host:5671"  # no password
    assert redacted_address("127.0.0.1:10911") == "127.0.0.1:10911"
    address = parse_broker_address(f"nats://owner:{PASSWORD}@127.0.0.1:4222,127.0.0.2:4222")
    assert address.userinfo == f"owner:{PASSWORD}"  # kept to connect with
    assert address.endpoints == (("127.0.0.1", 4222), ("127.0.0.2", 4222))
    assert address.redacted() == "nats://owner:***@127.0.0.1:4222,127.0.0.2:4222"
    _no_secret(repr(address))


@pytest.mark.parametrize("bad", [
    f"amqp://owner:{PASSWORD}@host:notaport/vh",
    f"nats://owner:{PASSWORD}@host:99999",
    f"rocketmq://owner:{PASSWORD}@host:8081",  # a kind that takes no USER:PASS@
    f"broker-lite://owner:{PASSWORD}@host:10911",
])
@pytest.mark.timeout(30)
def test_a_bad_address_error_hides_the_password(bad: str) -> None:
    with pytest.raises(BrokerAddressError) as caught:
        parse_broker_address(bad, setting="--broker")
    _no_secret(str(caught.value), caught.value.value, repr(caught.value))
    assert "owner:***@host" in str(caught.value)


@pytest.mark.timeout(30)
def test_outbox_repr_and_mode_errors_hide_the_password() -> None:
    engine = create_engine("sqlite://")
    try:
        outbox = Outbox(engine=engine, broker=f"amqp://owner:{PASSWORD}@127.0.0.1:5672/vh",
                        secret_key=WRONG)
        _no_secret(repr(outbox), str(outbox))
        assert "amqp://owner:***@127.0.0.1:5672/vh" in repr(outbox)
        assert outbox.broker_display == "amqp://owner:***@127.0.0.1:5672/vh"
        from outbox.targets.rabbitmq import AmqpSettings

        settings = AmqpSettings.of(outbox)
        assert PASSWORD in settings.url  # what aio-pika connects with
        _no_secret(repr(settings), settings.shown)
        with pytest.raises(ConfigurationError) as caught:
            Outbox(engine=engine, broker=f"nats://owner:{PASSWORD}@127.0.0.1:4222",
                   mode="half_first")
        _no_secret(str(caught.value))
        assert "nats://owner:***@127.0.0.1:4222" in str(caught.value)
    finally:
        engine.dispose()


@pytest.mark.timeout(240)
def test_relay_checker_status_and_export_work_with_the_password_and_never_show_it(
        secured_nats: NatsServer, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'owner.sqlite'}"
    migrate.upgrade(url)
    create_stream(_address(secured_nats), STREAM, [TOPIC], RelaySettings())  # the CLI's
    engine = create_engine(url)
    try:
        outbox = Outbox(engine=engine, broker=_address(secured_nats))
        with Session(engine) as session, session.begin():
            tx_id = publish(session, TOPIC, {"order": 1}, outbox=outbox)
        broker = ["--broker", _address(secured_nats), "--log-level", "DEBUG"]
        # the owner's relay: the row reaches the stream through the password
        with rocketbox_process(["relay", "--db", url, *broker, "--concurrency", "1"]) as proc:
            out = LineCollector(proc.stdout)  # type: ignore[arg-type]
            err = LineCollector(proc.stderr)  # type: ignore[arg-type]

            def relayed() -> bool:
                if proc.poll() is not None:
                    raise AssertionError("relay exited:\n" + err.text())
                return read_status(engine).pending == 0

            wait_until(relayed, timeout=120, message=lambda: err.text()[-3000:])
            assert terminate(proc) == 0
            relay_output = out.text() + "\n" + err.text()
        assert [m.tx_id for m in stored(_address(secured_nats), STREAM)] == [tx_id]
        _no_secret(relay_output)

        with rocketbox_process(["checker", "--db", url, *broker]) as proc:
            out = LineCollector(proc.stdout)  # type: ignore[arg-type]
            err = LineCollector(proc.stderr)  # type: ignore[arg-type]
            ready = wait_until(lambda: out.find("rocketbox checker ready"), timeout=60,
                               message=lambda: out.text() + "\n" + err.text())
            assert terminate(proc) == 0
            checker_output = out.text() + "\n" + err.text()
        assert f"broker={_shown(secured_nats)}" in str(ready)
        _no_secret(checker_output)

        export = tmp_path / "export.jsonl"
        done = run_rocketbox(["broker-export", "--broker", _address(secured_nats),
                              "--out", str(export), "--source", STREAM], timeout=90)
        assert done.returncode == 0, done.stderr
        assert f"from {_shown(secured_nats)} ->" in done.stdout
        assert tx_id in export.read_text()
        _no_secret(done.stdout, done.stderr, export.read_text())

        for args in (["status", "--db", url], ["status", "--db", url, "--json"]):
            done = run_rocketbox(args, timeout=60)
            assert done.returncode == 0, done.stderr
            _no_secret(done.stdout, done.stderr)
        _no_secret(*(" ".join(row) for row in _state_rows(url)))
    finally:
        engine.dispose()


@pytest.mark.timeout(180)
def test_a_wrong_password_is_refused_and_not_shown(secured_nats: NatsServer,
                                                   tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'attacker.sqlite'}"
    migrate.upgrade(url)
    wrong = _address(secured_nats, WRONG)
    export = run_rocketbox(["broker-export", "--broker", wrong, "--out",
                            str(tmp_path / "stolen.jsonl"), "--source", STREAM], timeout=90)
    relay = run_rocketbox(["relay", "--db", url, "--broker", wrong, "--log-level", "DEBUG",
                           "--concurrency", "1"], timeout=120)
    for done in (export, relay):
        assert done.returncode != 0, done.stdout + done.stderr
        assert "refused the credentials" in done.stderr, done.stderr
        assert _shown(secured_nats) in done.stderr, done.stderr
        _no_secret(done.stdout, done.stderr)
    assert not (tmp_path / "stolen.jsonl").exists()
    _no_secret(*(" ".join(row) for row in _state_rows(url)))


@pytest.mark.timeout(180)
def test_an_unreachable_broker_is_stored_and_shown_without_the_password(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'down.sqlite'}"
    migrate.upgrade(url)
    port = free_port()  # nobody listens: the relay starts anyway and marks the outage
    address = f"nats://owner:{PASSWORD}@127.0.0.1:{port}"
    shown = f"nats://owner:***@127.0.0.1:{port}"
    with rocketbox_process(["relay", "--db", url, "--broker", address, "--log-level", "DEBUG",
                            "--concurrency", "1"]) as proc:
        out = LineCollector(proc.stdout)  # type: ignore[arg-type]
        err = LineCollector(proc.stderr)  # type: ignore[arg-type]
        wait_until(lambda: _state_rows(url), timeout=90,
                   message=lambda: out.text() + "\n" + err.text())
        status = run_rocketbox(["status", "--db", url], timeout=60)
        status_json = run_rocketbox(["status", "--db", url, "--json"], timeout=60)
        terminate(proc)
        output = out.text() + "\n" + err.text()
    assert f"broker {shown} unreachable" in output, output
    [row] = _state_rows(url)
    assert row[0] == shown
    assert shown in status.stdout, status.stdout
    assert [b["broker"] for b in json.loads(status_json.stdout)["brokers_unreachable"]] == [shown]
    _no_secret(output, status.stdout, status.stderr, status_json.stdout, " ".join(row))

    # the same mark made in this process: no log record carries the password either
    from outbox import broker_health

    engine = create_engine(url)
    try:
        with caplog.at_level(logging.DEBUG):
            broker_health.pass_failed(Outbox(engine=engine, broker=address),
                                      ConnectionRefusedError(f"NATS at {shown} unreachable"))
        _no_secret(*(r.getMessage() for r in caplog.records))
    finally:
        engine.dispose()
    _no_secret(*(" ".join(row) for row in _state_rows(url)))

