"""The native door's HELLO: who the client is, and what the broker answers.

The first frame of every connection is a HELLO. It must speak this protocol's
version and name a client id; under an ACL it is signed (hex HMAC-SHA256 over
``client_id``, ``timestamp_ms`` and ``nonce``, keyed by the account's secret:
:func:`broker_lite.protocol.signing.hello_signature_ok`) and names the account
whose permissions the connection then has.
"""

from __future__ import annotations

import functools
import time

from broker_lite.core.acl import Account
from broker_lite.errors import ProtocolError, ResponseCode
from broker_lite.protocol import PROTOCOL_VERSION
from broker_lite.protocol import messages as m
from broker_lite.protocol.signing import hello_signature_ok
from broker_lite.serving.context import ServerContext

__all__ = ["authenticate", "welcome"]


def _signed_hello(hello: m.HelloRequest, secret: str) -> bool:
    return hello_signature_ok(secret, hello.client_id, hello.timestamp_ms, hello.nonce,
                              hello.signature)


def authenticate(ctx: ServerContext, hello: m.HelloRequest) -> Account | None:
    """The account ``hello`` signed for (``None`` without an ACL).

    Raises :class:`~broker_lite.errors.ProtocolError` for another protocol
    version or an empty client id, and the ACL's errors for a bad signature.
    """
    if hello.protocol_version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {hello.protocol_version} is not supported (want "
            f"{PROTOCOL_VERSION})", code=ResponseCode.VERSION_NOT_SUPPORTED)
    if not hello.client_id:
        raise ProtocolError("HELLO.client_id must not be empty",
                            code=ResponseCode.MALFORMED_REQUEST)
    if ctx.acl is None:
        return None
    return ctx.acl.authenticate(
        hello.access_key, hello.timestamp_ms, hello.nonce, int(time.time() * 1000),
        signed_by=functools.partial(_signed_hello, hello))


def welcome(ctx: ServerContext) -> m.HelloResponse:
    """The answer to an accepted HELLO: the broker's name, version, frame limit and clock."""
    return m.HelloResponse(
        broker_name=ctx.broker.config.broker_name, protocol_version=PROTOCOL_VERSION,
        max_frame_size=ctx.config.max_frame_size, server_time_ms=int(time.time() * 1000))
