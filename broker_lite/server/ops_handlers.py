"""Handlers of the operations requests (:mod:`broker_lite.serving.operations`).

Under an ACL each needs an admin account: they show every group, topic and
transaction, and a resend writes to any group's retry topic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from broker_lite.protocol import ops_messages as ops
from broker_lite.server.fit import pull_body
from broker_lite.serving import operations
from broker_lite.serving.context import ServerContext, Session
from broker_lite.serving.durability import wait_flushed

__all__ = ["OPS_HANDLERS"]


def _admin(session: Session, what: str) -> None:
    if session.account is not None:
        session.account.check_admin(what)


async def consumer_groups(ctx: ServerContext, session: Session,
                          req: m.Empty) -> ops.ConsumerGroupsResponse:
    _admin(session, "listing consumer groups")
    return operations.consumer_groups(ctx.broker)


async def broker_stats(ctx: ServerContext, session: Session, req: m.Empty) -> ops.BrokerStats:
    _admin(session, "reading broker stats")
    return operations.broker_stats(ctx.broker)


async def transaction_list(ctx: ServerContext, session: Session,
                           req: ops.TransactionListRequest) -> ops.TransactionListResponse:
    _admin(session, "listing pending transactions")
    return operations.pending_transactions(ctx.broker, req.limit)


async def browse_queue(ctx: ServerContext, session: Session,
                       req: ops.BrowseRequest) -> msgspec.Raw:
    """A :class:`~broker_lite.protocol.messages.PullResponse`, encoded (see :mod:`.fit`)."""
    _admin(session, f"browsing {req.topic!r}")
    return pull_body(operations.browse(ctx.broker, req), ctx.config.max_frame_size, req.topic)


async def resend_message(ctx: ServerContext, session: Session,
                         req: ops.ResendRequest) -> m.SendResult:
    _admin(session, f"resending {req.msg_id!r} to group {req.group!r}")
    result, end = operations.resend(ctx.broker, req)
    await wait_flushed(ctx, end)
    return result


OPS_HANDLERS: dict[int, Callable[[ServerContext, Session, Any], Awaitable[Any]]] = {
    RequestCode.CONSUMER_GROUPS: consumer_groups,
    RequestCode.BROKER_STATS: broker_stats,
    RequestCode.TRANSACTION_LIST: transaction_list,
    RequestCode.BROWSE_QUEUE: browse_queue,
    RequestCode.RESEND_MESSAGE: resend_message,
}
