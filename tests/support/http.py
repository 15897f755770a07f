"""A one-shot HTTP/JSON request for tests that drive real web servers."""

from __future__ import annotations

import http.client as httplib
import json
from typing import Any

__all__ = ["http"]


def http(address: str, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
    """One request; returns the status and the JSON (or text) body."""
    host, port = address.rsplit(":", 1)
    conn = httplib.HTTPConnection(host, int(port), timeout=30)
    try:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        raw = response.read().decode("utf-8", "replace")
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw
