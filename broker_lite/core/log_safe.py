"""Client-supplied values made safe for a log line.

A message id, key, client id or topic comes from the client; written as is,
a ``\\n`` in it forges a log line of its own. :func:`printable` escapes
control (and other unprintable) characters and cuts long values.
"""

from __future__ import annotations

import logging

__all__ = ["EscapingFilter", "escape_handlers", "printable"]


def printable(value: object, limit: int = 200) -> str:
    """A client-supplied value, safe for one log line: control characters escaped
    (``\\n`` -> ``\\x0a``), cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256
                   else f"\\u{ord(c):04x}" for c in text)


class EscapingFilter(logging.Filter):
    """A handler filter: each record's message (not its traceback) with control characters
    escaped, whatever a log call forgot to escape. The broker's ``serve`` installs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.isprintable():
            record.msg, record.args = printable(message, limit=1 << 16), None
        return True


def escape_handlers(logger: logging.Logger | None = None) -> None:
    """Install :class:`EscapingFilter` on every handler of ``logger`` (the root's)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, EscapingFilter) for f in handler.filters):
            handler.addFilter(EscapingFilter())
