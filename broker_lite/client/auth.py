"""HELLO credentials: the signature a broker run with ``--acl`` checks.

The formula is the protocol's (see :class:`broker_lite.protocol.messages.HelloRequest`):
hex HMAC-SHA256, keyed by the secret key, over
``f"{client_id}\\n{timestamp_ms}\\n{nonce}"``. Client and broker share one
implementation, :func:`broker_lite.protocol.signing.sign_hello`.
"""

from __future__ import annotations

import time
import uuid

from broker_lite.protocol import PROTOCOL_VERSION
from broker_lite.protocol import messages as m
from broker_lite.protocol.signing import sign_hello

__all__ = ["hello_request"]


def hello_request(client_id: str, access_key: str | None, secret_key: str | None) -> m.HelloRequest:
    """The HELLO body: signed with a fresh timestamp and nonce when credentials are given."""
    if access_key is None or secret_key is None:
        return m.HelloRequest(client_id=client_id, protocol_version=PROTOCOL_VERSION)
    timestamp_ms = int(time.time() * 1000)
    nonce = uuid.uuid4().hex
    return m.HelloRequest(
        client_id=client_id,
        protocol_version=PROTOCOL_VERSION,
        access_key=access_key,
        timestamp_ms=timestamp_ms,
        nonce=nonce,
        signature=sign_hello(secret_key, client_id, timestamp_ms, nonce),
    )
