"""Sync-flush acknowledgements, shared by both doors.

In ``sync`` flush mode a send is answered only once its bytes are durable.
:func:`flush_future` parks the request in the context's :class:`FlushGate`,
which the store's flusher settles once per fsync; :func:`flush_outcome` turns
what the gate answered into the error to reply with; :func:`wait_flushed` is
both, for a coroutine.
"""

from __future__ import annotations

import asyncio

from broker_lite.errors import BrokerError, ResponseCode, UnavailableError
from broker_lite.serving.context import ServerContext
from broker_lite.serving.flushgate import FlushGate, FlushTimeout

__all__ = ["flush_future", "flush_outcome", "wait_flushed"]


def flush_future(ctx: ServerContext,
                 end_offset: int) -> asyncio.Future[BaseException | None] | None:
    """Where to wait for ``end_offset`` to be durable; ``None`` in async flush mode.

    The future resolves to ``None`` once durable, to the flusher's error, or
    to a :class:`FlushTimeout` after ``flush_timeout``; :func:`flush_outcome`
    turns that into the error to answer with.
    """
    if ctx.broker.config.store.flush != "sync":
        return None
    gate = ctx.flush_gate
    if gate is None:
        gate = ctx.flush_gate = FlushGate(ctx.broker.store, ctx.loop)
    return gate.wait(end_offset, ctx.config.flush_timeout)


def flush_outcome(ctx: ServerContext, end_offset: int,
                  error: BaseException | None) -> BrokerError | None:
    """The error a sync-flush acknowledgement answers with (``None``: durable)."""
    if error is None:
        return None
    if isinstance(error, FlushTimeout):
        return _flush_error(f"no fsync of offset {end_offset} within "
                            f"{ctx.config.flush_timeout:g}s; the message is stored but its "
                            f"durability is not confirmed")
    if isinstance(error, BrokerError):
        return error
    failure = _flush_error(f"flush failed: {error}")
    failure.__cause__ = error  # as "raise ... from error" would
    failure.__suppress_context__ = True
    return failure


async def wait_flushed(ctx: ServerContext, end_offset: int) -> None:
    """Return once the store has made ``end_offset`` durable (at once in async flush mode).

    Requests park in the context's :class:`FlushGate`, which the store's
    flusher settles once per fsync. A flush error is raised as a BrokerError
    (``FLUSH_DISK_TIMEOUT`` unless it is one already); no answer within
    ``flush_timeout`` raises ``FLUSH_DISK_TIMEOUT`` too: the message is stored,
    its durability is not confirmed.
    """
    future = flush_future(ctx, end_offset)
    if future is None:
        return
    error = flush_outcome(ctx, end_offset,
                          future.result() if future.done() else await future)
    if error is not None:
        raise error


def _flush_error(message: str) -> BrokerError:
    exc = UnavailableError(message)
    exc.code = ResponseCode.FLUSH_DISK_TIMEOUT
    return exc
