"""Answers that carry messages, cut to one response frame (pulls, key lookups, browsing).

A PULL's (and a BROWSE's) answer is written from the core's
:class:`~broker_lite.core.model.PullResult` as it is: that struct *is* the
native :class:`~broker_lite.protocol.messages.PullResponse` (one definition, in
:mod:`broker_lite.values.messages`; ``tests/broker_lite/server/test_translate.py``
pins its bytes). The answer is encoded
once; only an answer larger than a frame is measured message by message and
cut, and the next pull fetches the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from broker_lite.core import model
from broker_lite.errors import ProtocolError, ResponseCode
from broker_lite.protocol import encode

__all__ = ["RESPONSE_OVERHEAD", "fit", "pull_body"]

#: room for the frame header and the fields around the messages of a response
RESPONSE_OVERHEAD = 1024


def fit(messages: Sequence[msgspec.Struct], limit: int) -> int:
    """How many of ``messages``, from the first, fit in a frame of ``limit`` bytes."""
    used = RESPONSE_OVERHEAD
    for i, message in enumerate(messages):
        used += len(encode(message))
        if used > limit:
            return i
    return len(messages)


def pull_body(result: model.PullResult, limit: int, topic: str) -> msgspec.Raw:
    """``result`` encoded as a PULL response body that fits a frame of ``limit`` bytes.

    Raises :class:`~broker_lite.errors.ProtocolError` (``FRAME_TOO_LARGE``) when
    even the first message of ``topic`` does not fit.
    """
    body = encode(result)
    if len(body) + RESPONSE_OVERHEAD <= limit:
        return msgspec.Raw(body)
    keep = fit(result.messages, limit)
    if keep == len(result.messages):
        return msgspec.Raw(body)
    if keep == 0:
        raise ProtocolError(
            f"message at queue offset {result.messages[0].queue_offset} of {topic!r} "
            f"does not fit in a frame of {limit} bytes", code=ResponseCode.FRAME_TOO_LARGE)
    cut = msgspec.structs.replace(result, messages=result.messages[:keep],
                                  next_offset=result.messages[keep].queue_offset)
    return msgspec.Raw(encode(cut))
