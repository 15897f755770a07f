"""The broker export's file format (docs/audit.md, "Broker export"): JSON Lines, checked.

What :func:`write_export` writes, :func:`read_export` reads back unchanged; a
bad line gets one :class:`ExportFormatError` naming the file, the line and the
field, and a bad message is refused when it is made.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outbox.broker_export import (
    ExportedMessage,
    ExportFormatError,
    body_sha256,
    read_export,
    write_export,
)
from outbox.errors import OutboxError

SHA = body_sha256(b'{"n": 1}')
GOOD = {"tx_id": "tx-1", "position": "ORDERS:1", "time_ms": 1764316800123,
        "body_sha256": SHA, "destination": "orders.created"}

messages = st.builds(
    ExportedMessage,
    tx_id=st.text(min_size=1, max_size=255),
    position=st.text(min_size=1, max_size=255),
    time_ms=st.integers(min_value=0, max_value=2**62),
    body_sha256=st.binary(max_size=64).map(body_sha256),
    destination=st.text(min_size=1, max_size=255),
)


@pytest.mark.timeout(120)
@settings(max_examples=50, deadline=None)
@given(st.lists(messages, max_size=20))
def test_what_is_written_reads_back_unchanged(tmp_path_factory: pytest.TempPathFactory,
                                              written: list[ExportedMessage]) -> None:
    path = tmp_path_factory.mktemp("export") / "broker.jsonl"
    assert write_export(written, path) == len(written)
    assert list(read_export(path)) == written
    assert not path.with_name(path.name + ".tmp").exists()


@pytest.mark.timeout(30)
def test_each_line_is_one_json_object_with_the_five_fields(tmp_path: Path) -> None:
    path = tmp_path / "broker.jsonl"
    write_export([ExportedMessage(**GOOD)], path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [GOOD]


@pytest.mark.timeout(30)
def test_empty_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "broker.jsonl"
    path.write_text("\n" + json.dumps(GOOD) + "\n\n", encoding="utf-8")
    assert [m.tx_id for m in read_export(path)] == ["tx-1"]


def _bad(change: dict[str, object], drop: str = "") -> str:
    fields = {**GOOD, **change}
    fields.pop(drop, None)
    return json.dumps(fields)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("line", "field", "says"), [
    (_bad({}, drop="tx_id"), "tx_id", "tx_id is missing"),
    (_bad({"tx_id": ""}), "tx_id", "tx_id is empty"),
    (_bad({"tx_id": "x" * 256}), "tx_id", "tx_id is 256 characters long; the limit is 255"),
    (_bad({"tx_id": 7}), "tx_id", "tx_id must be a string, not int"),
    (_bad({"position": None}), "position", "position must be a string, not NoneType"),
    (_bad({"time_ms": "1764316800123"}), "time_ms", "time_ms must be an integer"),
    (_bad({"time_ms": 1.5}), "time_ms", "time_ms must be an integer"),
    (_bad({"time_ms": True}), "time_ms", "time_ms must be an integer"),
    (_bad({"time_ms": -1}), "time_ms", "time_ms is -1; it must be >= 0"),
    (_bad({"body_sha256": SHA.upper()}), "body_sha256", "64 lowercase hex digits"),
    (_bad({"body_sha256": SHA[:-1]}), "body_sha256", "64 lowercase hex digits"),
    (_bad({}, drop="destination"), "destination", "destination is missing"),
    (_bad({"txid": "tx-1"}), "txid", "unknown key 'txid'"),
    ("[1, 2]", "", "a line must be a JSON object, not list"),
    ('{"tx_id": "tx-1", ', "", "not JSON"),
])
def test_a_bad_line_names_the_file_the_line_and_the_field(tmp_path: Path, line: str,
                                                          field: str, says: str) -> None:
    path = tmp_path / "broker.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n" + json.dumps(GOOD) + "\n",
                    encoding="utf-8")
    read = read_export(path)
    assert next(read).tx_id == "tx-1"  # the lines before it are read
    with pytest.raises(ExportFormatError) as caught:
        next(read)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 3, field)
    assert str(error).startswith(f"{path}: line 3{f' ({field})' if field else ''}: ")
    assert says in str(error)
    assert "\n" not in str(error)
    assert isinstance(error, OutboxError) and isinstance(error, ValueError)


@pytest.mark.timeout(30)
def test_a_bad_message_is_refused_when_made_and_never_written(tmp_path: Path) -> None:
    with pytest.raises(ExportFormatError, match=r"body_sha256 must be 64 lowercase hex") as bad:
        ExportedMessage(**{**GOOD, "body_sha256": "nope"})
    assert bad.value.field == "body_sha256"
    path = tmp_path / "broker.jsonl"
    path.write_text("kept\n", encoding="utf-8")
    with pytest.raises(ExportFormatError, match=r"message 2 is a dict, not an ExportedMessage"):
        write_export([ExportedMessage(**GOOD), GOOD], path)
    assert path.read_text(encoding="utf-8") == "kept\n"  # the old export is left whole
    assert not path.with_name(path.name + ".tmp").exists()


@pytest.mark.timeout(120)
def test_the_module_is_light_an_exporter_or_a_spark_task_loads_no_more() -> None:
    """stdlib and msgspec only: no SQLAlchemy, no broker client, no Spark."""
    probe = ("import sys, json\nimport outbox.broker_export\n"
             "print(json.dumps(sorted(n for n in ('sqlalchemy', 'pyspark', 'grpc', 'rocketmq', "
             "'celery', 'broker_lite', 'rich') if n in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=100, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
