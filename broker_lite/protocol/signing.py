"""The native protocol's HELLO signature: a pure function, shared by both ends.

A client proves it holds the secret of its access key by sending
``signature = hex HMAC-SHA256(secret, f"{client_id}\\n{timestamp_ms}\\n{nonce}")``
in its :class:`~broker_lite.protocol.messages.HelloRequest`. The client signs
with :func:`sign_hello`; the native door checks with :func:`hello_signature_ok`,
which the core's ACL calls with the account's secret (the core keeps the
accounts, the clock-skew and replay rules, never the formula).
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["hello_signature_ok", "sign_hello"]


def sign_hello(secret: str, client_id: str, timestamp_ms: int, nonce: str) -> str:
    """The HELLO signature a client sends: hex HMAC-SHA256 of the three fields."""
    payload = f"{client_id}\n{timestamp_ms}\n{nonce}".encode()
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def hello_signature_ok(secret: str, client_id: str, timestamp_ms: int, nonce: str,
                       signature: str) -> bool:
    """True when ``signature`` is what :func:`sign_hello` gives (compared in constant time)."""
    expected = sign_hello(secret, client_id, timestamp_ms, nonce)
    return hmac.compare_digest(expected.encode(), signature.lower().encode())
