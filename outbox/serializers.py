"""Message body serializers. JSON is the default; any object with ``dumps`` fits."""

from __future__ import annotations

import json
from typing import Any, Protocol

from outbox.errors import SerializationError

__all__ = ["JsonSerializer", "RawSerializer", "Serializer", "to_body"]


class Serializer(Protocol):
    content_type: str

    def dumps(self, value: Any) -> bytes: ...


class JsonSerializer:
    """Compact UTF-8 JSON; dates and other objects go through ``default`` (``str``)."""

    content_type = "application/json"

    def dumps(self, value: Any) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                              default=str).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"body is not JSON-serializable: {exc}",
                                     body_type=type(value).__name__) from exc


class RawSerializer:
    """Bytes as they are, ``str`` as UTF-8; anything else is an error."""

    content_type = "application/octet-stream"

    def dumps(self, value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode("utf-8")
        raise SerializationError(f"RawSerializer takes bytes or str, not {type(value).__name__}",
                                 body_type=type(value).__name__)


def to_body(value: Any, serializer: Serializer) -> bytes:
    """Bytes pass through untouched, whatever the serializer; the rest is serialized."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return serializer.dumps(value)
