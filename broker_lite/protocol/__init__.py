"""The native protocol: framing, codes and bodies. Pure functions, no I/O.

The broker's asyncio server (:mod:`broker_lite.server`) and the client
(:mod:`broker_lite.client`) both speak it.
"""

from __future__ import annotations

from broker_lite.protocol import messages
from broker_lite.protocol.codec import REQUEST_TYPES, RESPONSE_TYPES, BodyError, decode, encode
from broker_lite.protocol.codes import RequestCode, ResponseCode
from broker_lite.protocol.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_SIZE,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameError,
    FrameKind,
    encode_frame,
    parse_header,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "PROTOCOL_VERSION",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "BodyError",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameKind",
    "RequestCode",
    "ResponseCode",
    "decode",
    "encode",
    "encode_frame",
    "messages",
    "parse_header",
]
