"""``outbox.log_setup``: records carry tx_id and their other extra fields, as JSON or key=value."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from outbox.log_setup import (
    ContextFilter,
    StructuredFormatter,
    configure_logging,
    extra_fields,
    log_context,
)


def _record(msg: str = "relay of %s failed", *args: object, **extra: object
            ) -> logging.LogRecord:
    logger = logging.getLogger("rocketbox.test")
    return logger.makeRecord("rocketbox.test", logging.WARNING, __file__, 1, msg,
                             args or ("T1",), None, extra=extra)


@pytest.mark.timeout(10)
def test_json_lines_carry_the_extra_fields() -> None:
    line = StructuredFormatter("json").format(_record(tx_id="T1", attempt=3, topic="orders"))
    data = json.loads(line)
    assert list(data)[:7] == ["ts", "level", "logger", "msg", "tx_id", "topic", "attempt"]
    assert data["msg"] == "relay of T1 failed"
    assert (data["level"], data["logger"], data["tx_id"], data["attempt"]) == \
        ("WARNING", "rocketbox.test", "T1", 3)
    assert data["ts"].endswith("Z")


@pytest.mark.timeout(10)
def test_key_value_lines_quote_what_needs_it() -> None:
    line = StructuredFormatter("kv").format(_record(tx_id="T1", error='said "no" = bad'))
    assert " level=WARNING logger=rocketbox.test msg=\"relay of T1 failed\" tx_id=T1 " in line
    assert line.endswith('error="said \\"no\\" = bad"')


@pytest.mark.timeout(10)
def test_exceptions_are_included() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed",
                                                   (), sys.exc_info())
    data = json.loads(StructuredFormatter("json").format(record))
    assert "RuntimeError: boom" in data["exc"]


@pytest.mark.timeout(10)
def test_log_context_adds_fields_and_extra_wins() -> None:
    filt = ContextFilter()
    with log_context(tx_id="CTX", request="r-1"):
        inner = _record()
        filt.filter(inner)
        explicit = _record(tx_id="EXPLICIT")
        filt.filter(explicit)
    outside = _record()
    filt.filter(outside)
    assert extra_fields(inner) == {"tx_id": "CTX", "request": "r-1"}
    assert extra_fields(explicit)["tx_id"] == "EXPLICIT"
    assert extra_fields(outside) == {}


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.timeout(10)
def test_configure_logging_replaces_its_own_handler(root_logging: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("INFO", "kv", first)
    configure_logging("INFO", "json", second)
    with log_context(tx_id="T9"):
        logging.getLogger("rocketbox.relay").info("relayed", extra={"topic": "orders"})
    assert first.getvalue() == ""
    data = json.loads(second.getvalue())
    assert (data["msg"], data["tx_id"], data["topic"]) == ("relayed", "T9", "orders")


@pytest.mark.timeout(10)
def test_the_default_stream_is_the_current_stderr(root_logging: None,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("WARNING")
    logging.getLogger("rocketbox.x").warning("hello", extra={"tx_id": "T2"})
    assert capsys.readouterr().err.endswith(" msg=hello tx_id=T2\n")


@pytest.mark.timeout(10)
def test_unknown_format_or_level_is_refused(root_logging: None) -> None:
    with pytest.raises(ValueError, match="'kv' or 'json'"):
        StructuredFormatter("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("LOUD")


@pytest.mark.timeout(10)
def test_the_command_leaves_logging_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    from outbox.cli import main

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert main(["status", "--db", "not-a-url", "--log-level", "debug"]) == 2
    assert (list(root.handlers), root.level) == (handlers, level)
    assert main(["status", "--db", "x", "--log-level", "LOUD"]) == 2
    assert "unknown level 'LOUD'" in capsys.readouterr().err
