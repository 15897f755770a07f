"""Structured logs: every record carries its ``extra`` fields, ``tx_id`` first.

rocketbox logs with ``extra={"tx_id": ...}`` wherever a unit of work is
concerned (publish, relay, check-back, replay). The standard formatters drop
those fields; :class:`StructuredFormatter` renders them, as one JSON object
per line or as ``key=value`` pairs::

    ts=2025-01-01T12:00:00.123Z level=WARNING logger=rocketbox.relay msg="relay of ... failed"
    tx_id=5F0C... attempt=3

:func:`log_context` binds fields for a block (a Celery task, a request), and
:class:`ContextFilter` adds them to every record logged inside it, so a
library deep down need not know the ``tx_id``. :func:`configure_logging` is
what the ``rocketbox`` command calls; applications wire the formatter and
filter into their own logging config instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from outbox.errors import ConfigurationError

__all__ = [
    "ContextFilter",
    "LogFormat",
    "StructuredFormatter",
    "configure_logging",
    "extra_fields",
    "log_context",
]

LogFormat = Literal["kv", "json"]

#: attributes every LogRecord has; anything else on a record came from ``extra``
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName"}
#: fields printed first, in this order, when present
_FIRST = ("tx_id", "topic", "group")
_context: ContextVar[Mapping[str, Any] | None] = ContextVar("rocketbox_log_context",
                                                            default=None)
_HANDLER_MARK = "_rocketbox_handler"


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every record logged in this block (this thread or task only)."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the fields bound by :func:`log_context` onto each record (``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The record's non-standard attributes, ``tx_id`` and friends first."""
    extras = {k: v for k, v in vars(record).items()
              if k not in _STANDARD and not k.startswith("_")}
    ordered = {k: extras.pop(k) for k in _FIRST if k in extras}
    ordered.update(sorted(extras.items()))
    return ordered


def _kv_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c in text for c in ' "=\n\t\\'):
        return json.dumps(text, ensure_ascii=False)
    return text


class StructuredFormatter(logging.Formatter):
    """One line per record: ``ts``, ``level``, ``logger``, ``msg``, then the extra fields.

    ``style="json"`` writes a JSON object (values that JSON cannot hold are
    written with ``str``); ``style="kv"`` writes ``key=value`` pairs, quoting
    values that contain spaces, quotes or ``=``. An exception goes in ``exc``.
    """

    def __init__(self, style: LogFormat = "kv") -> None:
        super().__init__()
        if style not in ("kv", "json"):
            raise ConfigurationError(f"log format must be 'kv' or 'json', not {style!r}",
                                     setting="log format")
        self.style_name: LogFormat = style

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        stamp = datetime.fromtimestamp(record.created, UTC)
        out: dict[str, Any] = {
            "ts": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return out

    def format(self, record: logging.LogRecord) -> str:
        fields = self.fields(record)
        if self.style_name == "json":
            return json.dumps(fields, default=str, ensure_ascii=False)
        return " ".join(f"{key}={_kv_value(value)}" for key, value in fields.items())


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record comes (as logging's last resort)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(level: str | int = "INFO", style: LogFormat = "kv",
                      stream: TextIO | None = None) -> logging.Handler:
    """Send the root logger's records to ``stream`` (default: the current ``sys.stderr``)
    through the structured formatter.

    Calling it again replaces the handler it installed before, rather than
    adding a second one. Raises :class:`~outbox.errors.ConfigurationError` (a
    ``ValueError``) for an unknown level.
    """
    root = logging.getLogger()
    resolved = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(resolved, int):
        raise ConfigurationError(f"unknown log level {level!r}", setting="log level")
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    handler: logging.Handler = (logging.StreamHandler(stream) if stream is not None
                                else _StderrHandler())
    handler.setFormatter(StructuredFormatter(style))
    handler.addFilter(ContextFilter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(resolved)
    return handler
