"""Configuration errors vs outages, against a real broker_lite.

A host that does not resolve, refused credentials and an account without
permissions fail ``rocketbox relay`` / ``rocketbox checker`` at start-up:
exit 2, one line naming the setting. A broker that is down is an outage: the
relay keeps retrying and ``rocketbox status`` says since when it cannot reach
the broker, until a pass gets through.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from outbox import BrokerLitePublisher, Outbox, Relay, RelayError, RelaySettings, migrate, publish
from outbox.cli import main
from outbox.cli_commands import preflight
from tests.support import free_port, start_broker_lite, wait_until

ACL = {"accounts": [
    {"access_key": "shop", "secret_key": "shop-secret", "topic_perms": {"Orders": "PUB"}},
    {"access_key": "reader", "secret_key": "reader-secret", "topic_perms": {"Orders": "SUB"}},
]}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.sqlite'}"
    migrate.upgrade(url)
    return url


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["relay", "checker"])
def test_a_host_that_does_not_resolve_fails_at_once(command: str, db_url: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--db", db_url, "--broker", "no-such-broker.invalid:10911"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"rocketbox {command}: --broker no-such-broker.invalid:10911: host "
                          "'no-such-broker.invalid' does not resolve")


@pytest.mark.timeout(90)
def test_refused_credentials_and_permissions_fail_at_once(db_url: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    with start_broker_lite(tmp_path / "broker", ["--acl", str(acl)]) as broker:
        base = ["--db", db_url, "--broker", broker.native]
        cases = [
            (["relay", *base], "refused the credentials (no --access-key/--secret-key given)"),
            (["checker", *base, "--access-key", "shop", "--secret-key", "wrong"],
             "refused the credentials (--access-key/--secret-key): the signature does not match"),
            (["relay", *base, "--access-key", "reader", "--secret-key", "reader-secret"],
             "refused the account for producer group 'rocketbox' (--access-key, --group"),
        ]
        for argv, expected in cases:
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and expected in err, err
            assert err.startswith(f"rocketbox {argv[0]}: broker {broker.native} ")


@pytest.mark.timeout(120)
def test_an_outage_shows_in_status_until_a_pass_gets_through(db_url: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    engine = create_engine(db_url)
    outbox = Outbox(engine=engine, broker=address,
                    relay=RelaySettings(broker_timeout=1.0, backoff_base=0.01, jitter=0.0))
    with engine.begin() as conn:
        tx_id = publish(conn, "Orders", {"n": 1}, outbox=outbox)
    # at start-up, `relay` and `checker` go on through an outage (and say so)
    preflight("checker", outbox)
    assert "starting anyway, retrying with backoff" in capsys.readouterr().err
    publisher = BrokerLitePublisher(outbox)
    try:
        with pytest.raises(RelayError):
            Relay(outbox, publisher).run_once()
        assert main(["status", "--db", db_url, "--json"]) == 0
        [down] = json.loads(capsys.readouterr().out)["brokers_unreachable"]
        assert down["broker"] == address and "Connection refused" in down["last_error"]
        assert main(["status", "--db", db_url]) == 0
        assert "broker unreachable since" in capsys.readouterr().out

        with start_broker_lite(tmp_path / "broker", ["--port", str(port)]):
            wait_until(lambda: Relay(outbox, publisher).run_once().relayed == 1, timeout=30,
                       ignore=(RelayError,))
        assert main(["status", "--db", db_url, "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["brokers_unreachable"] == [] and status["totals"]["pending"] == 0
    finally:
        publisher.close()
        engine.dispose()
    assert tx_id
