"""``rocketbox broker-export``: the broker's kind writes its export, or says to use --commitlog.

The dispatch lives in ``outbox.targets.choose`` (no broker branch outside
``outbox/targets``). A kind's ``TargetSupport`` may offer ``export_messages``;
broker_lite and RocketMQ do not (the audit decodes their commit logs), so the
command names the kind and points to ``--commitlog``. The happy path goes
through :func:`export_with` with a support at the seam that writes an export.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from outbox import Outbox
from outbox.broker_export import ExportedMessage, body_sha256, read_export, write_export
from outbox.cli import main
from outbox.errors import ConfigurationError
from outbox.targets.choose import export_messages, export_with


class _Exporting:
    """A kind's support that can export: what it was asked, and two messages."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Path, str | None]] = []

    def export_messages(self, outbox: Outbox, out: Path, *, source: str | None) -> int:
        self.asked.append((outbox.broker, out, source))
        return write_export([ExportedMessage(f"tx-{n}", f"ORDERS:{n}", 1764316800000 + n,
                                             body_sha256(b"%d" % n), "orders")
                             for n in (1, 2)], out)


def _outbox(broker: str) -> Outbox:
    return Outbox(engine=create_engine("sqlite://"), broker=broker)


@pytest.mark.timeout(30)
def test_a_kind_that_exports_writes_the_file_it_is_given(tmp_path: Path) -> None:
    support, out = _Exporting(), tmp_path / "broker.jsonl"
    assert export_with(support, "Exporting", _outbox("127.0.0.1:1"), out, source="ORDERS") == 2
    assert support.asked == [("127.0.0.1:1", out, "ORDERS")]
    assert [m.position for m in read_export(out)] == ["ORDERS:1", "ORDERS:2"]


@pytest.mark.timeout(30)
def test_a_kind_without_an_export_is_named_and_pointed_to_the_commitlog(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"^the broker_lite target has no broker "
                                                 r"export: .*`rocketbox audit --commitlog DIR`"):
        export_messages(_outbox("127.0.0.1:1"), tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("broker", "kind"), [
    ("127.0.0.1:1", "broker_lite"), ("broker-lite://127.0.0.1:1", "broker_lite"),
    ("rocketmq://127.0.0.1:1", "RocketMQ")])
def test_the_command_says_in_one_line_which_kind_has_no_export(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], broker: str, kind: str) -> None:
    if kind == "RocketMQ":
        pytest.importorskip("rocketmq")  # the rocketmq extra: its support module loads it
    out = tmp_path / "broker.jsonl"
    assert main(["broker-export", "--broker", broker, "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"rocketbox broker-export: the {kind} target has no broker export: "
                            f"its broker keeps a commit log, so audit it with `rocketbox audit "
                            f"--commitlog DIR`\n")
    assert not out.exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("argv", "says"), [
    (["--broker", "127.0.0.1:1", "--out", "{tmp}"], "--out: {tmp} is a directory; give a file"),
    (["--broker", "127.0.0.1:1", "--out", "{tmp}/no/such.jsonl"],
     "--out: no such directory: {tmp}/no"),
    (["--broker", "nats//x", "--out", "{tmp}/x.jsonl"], "--broker = 'nats//x'"),
])
def test_bad_arguments_are_one_line_naming_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert main(["broker-export", *(a.format(tmp=tmp_path) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rocketbox broker-export: ")
    assert says.format(tmp=tmp_path) in err


@pytest.mark.timeout(30)
def test_out_and_broker_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["broker-export", "--broker", "127.0.0.1:1"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --out" in capsys.readouterr().err
