"""The native door's dispatch table: one coroutine per request code.

Each handler takes the shared :class:`ServerContext`, the :class:`Session`
of the connection, and the decoded request body, and returns the response
body. It raises :class:`~broker_lite.errors.BrokerError` to answer with an
error code; the connection turns that into an error frame.

Broker methods are fast and never fsync, so handlers call them directly on
the event loop. What waits does so without blocking it: a sync-flush
acknowledgement waits for the flusher's callback
(:func:`~broker_lite.serving.wait_flushed`), and a long-polling PULL waits on
the :class:`~broker_lite.serving.ArrivalHub`.

The requests that are served most often also have a synchronous form in
:data:`INLINE`: it does all the work and returns the response with the log
offset that must be durable before it may go out (``-1``: none), or ``None``
when the request has to wait for something else (a long poll). The
connection runs those forms in its reader loop, without a task per request,
and only starts a task for what waits; each coroutine handler of those codes
is its inline form plus the wait, so both paths answer alike.

ACL checks (when the broker runs with one) happen here, before the broker is
asked anything; see :mod:`broker_lite.core.acl` for the rules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from broker_lite.core import Ended, Sent
from broker_lite.core.acl import Account
from broker_lite.core.model import NO_NEW_MESSAGE
from broker_lite.errors import (
    BrokerError,
    ProtocolError,
    ResponseCode,
)
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from broker_lite.server.fit import fit, pull_body
from broker_lite.server.ops_handlers import OPS_HANDLERS
from broker_lite.server.translate import registration_in
from broker_lite.serving.context import MAX_LONG_POLL_MS, ServerContext, Session
from broker_lite.serving.durability import wait_flushed
from broker_lite.serving.longpoll import long_poll_pull

__all__ = [
    "HANDLERS",
    "INLINE",
    "Handler",
    "InlineHandler",
]

Handler = Callable[[ServerContext, Session, Any], Awaitable[Any]]
#: ``(response, end offset to make durable first, or -1)``, or ``None``: "await the handler"
InlineHandler = Callable[[ServerContext, Session, Any], "tuple[Any, int] | None"]



# -- helpers -----------------------------------------------------------------------


def _check_send(ctx: ServerContext, account: Account | None, topic: str, producer_group: str,
                transactional: bool) -> None:
    """Pub on the topic; Create too when the send would create it; a half: Pub on its
    producer group (whose check-backs it will get)."""
    if account is None:
        return
    account.check_topic(topic, "Pub")
    if transactional:
        account.check_producer(producer_group)
    broker = ctx.broker
    if broker.config.auto_create_topics and broker.topics.get(topic) is None:
        account.check_auto_create(topic)


def _check_consume(session: Session, topic: str, group: str) -> None:
    account = session.account
    if account is not None:
        account.check_consume(topic, group)


def _check_producer(session: Session, producer_group: str) -> None:
    account = session.account
    if account is not None:
        account.check_producer(producer_group)


def _check_end(ctx: ServerContext, session: Session, producer_group: str, transaction_id: str,
               commit_log_offset: int) -> None:
    """Ending a transaction: Pub on its producer group and on the half's real topic."""
    account = session.account
    if account is None:
        return
    account.check_producer(producer_group)
    topic = ctx.broker.transaction_topic(transaction_id, commit_log_offset)
    if topic is not None:
        account.check_topic(topic, "Pub")


def _check_client(session: Session, client_id: str, what: str) -> None:
    if client_id != session.client_id:
        raise ProtocolError(
            f"{what}.client_id {client_id!r} is not the client id {session.client_id!r} this "
            f"connection said HELLO with", code=ResponseCode.MALFORMED_REQUEST)


def _error_body(exc: BrokerError) -> m.ErrorBody:
    return m.ErrorBody(message=str(exc), retriable=exc.retriable)


# -- connection ----------------------------------------------------------------------


async def heartbeat(ctx: ServerContext, session: Session, req: m.HeartbeatRequest) -> m.Empty:
    _check_client(session, req.client_id, "heartbeat")
    for group in req.producer_groups:
        _check_producer(session, group)
    for sub in req.consumers:
        _check_consume(session, sub.topic, sub.group)
    ctx.broker.register(registration_in(req), session)
    session.mark_registered()
    return m.Empty()


async def unregister(ctx: ServerContext, session: Session, req: m.HeartbeatRequest) -> m.Empty:
    _check_client(session, req.client_id, "unregister")
    ctx.broker.unregister(req.client_id, session)
    return m.Empty()


# -- producing -----------------------------------------------------------------------


def send_now(ctx: ServerContext, session: Session, req: m.SendRequest) -> tuple[m.SendResult, int]:
    _check_send(ctx, session.account, req.message.topic, req.producer_group,
                req.message.transactional)
    sent: Sent = ctx.broker.send(req.producer_group, req.message,
                                 born_host=session.remote_address)
    return sent.result, sent.end_offset


async def send(ctx: ServerContext, session: Session, req: m.SendRequest) -> m.SendResult:
    result, end = send_now(ctx, session, req)
    await wait_flushed(ctx, end)
    return result


def send_batch_now(ctx: ServerContext, session: Session,
                   req: m.SendBatchRequest) -> tuple[m.SendBatchResponse, int]:
    """Every message stored or refused on its own; durable up to the last one stored."""
    account = session.account
    if account is not None:  # once per (topic, half or not): a batch is mostly one topic
        checked: set[tuple[str, bool]] = set()
        for message in req.messages:
            key = (message.topic, message.transactional)
            if key not in checked:
                _check_send(ctx, account, message.topic, req.producer_group,
                            message.transactional)
                checked.add(key)
    outcomes = ctx.broker.send_batch(req.producer_group,
                                     req.messages,
                                     born_host=session.remote_address)
    results: list[m.SendItemResult] = []
    end = -1
    success = ResponseCode.SUCCESS
    for outcome in outcomes:
        if isinstance(outcome, Sent):
            results.append(m.SendItemResult(code=success, result=outcome.result))
            if outcome.end_offset > end:
                end = outcome.end_offset
        else:
            results.append(m.SendItemResult(code=outcome.code, error=_error_body(outcome)))
    return m.SendBatchResponse(results=results), end


async def send_batch(ctx: ServerContext, session: Session,
                     req: m.SendBatchRequest) -> m.SendBatchResponse:
    response, end = send_batch_now(ctx, session, req)
    if end >= 0:
        await wait_flushed(ctx, end)
    return response


# -- transactions ----------------------------------------------------------------------


def end_transaction_now(ctx: ServerContext, session: Session, req: m.EndTransactionRequest
                        ) -> tuple[m.EndTransactionResponse, int]:
    _check_end(ctx, session, req.producer_group, req.transaction_id, req.commit_log_offset)
    ended: Ended = ctx.broker.end_transaction(req)
    return ended.response, ended.end_offset


async def end_transaction(ctx: ServerContext, session: Session,
                          req: m.EndTransactionRequest) -> m.EndTransactionResponse:
    response, end = end_transaction_now(ctx, session, req)
    await wait_flushed(ctx, end)
    return response


def end_transaction_batch_now(ctx: ServerContext, session: Session,
                              req: m.EndTransactionBatchRequest
                              ) -> tuple[m.EndTransactionBatchResponse, int]:
    """Every end answered on its own; the ends allowed go to the core together."""
    items = req.items
    refused: dict[int, BrokerError] = {}
    if session.account is not None:
        for i, item in enumerate(items):
            try:
                _check_end(ctx, session, item.producer_group, item.transaction_id,
                           item.commit_log_offset)
            except BrokerError as exc:
                refused[i] = exc
        if refused:
            items = [item for i, item in enumerate(items) if i not in refused]
    ended = iter(ctx.broker.end_transactions(items))
    codes: list[int] = []
    results: list[m.EndTransactionResponse | None] = []
    errors: list[m.ErrorBody | None] = []
    end = -1
    success = ResponseCode.SUCCESS
    for i in range(len(req.items)):
        outcome = refused[i] if i in refused else next(ended)
        if isinstance(outcome, BrokerError):
            codes.append(outcome.code)
            results.append(None)
            errors.append(_error_body(outcome))
            continue
        if outcome.end_offset > end:
            end = outcome.end_offset
        codes.append(success)
        results.append(outcome.response)
        errors.append(None)
    return m.EndTransactionBatchResponse(codes=codes, results=results, errors=errors), end


async def end_transaction_batch(ctx: ServerContext, session: Session,
                                req: m.EndTransactionBatchRequest
                                ) -> m.EndTransactionBatchResponse:
    response, end = end_transaction_batch_now(ctx, session, req)
    if end >= 0:
        await wait_flushed(ctx, end)
    return response


# -- consuming ----------------------------------------------------------------------


def pull_now(ctx: ServerContext, session: Session,
             req: m.PullRequest) -> tuple[msgspec.Raw, int] | None:
    """The pull's answer if it has one now; ``None`` when it would long-poll."""
    _check_consume(session, req.topic, req.group)
    result = ctx.broker.pull(req)
    if result.status == NO_NEW_MESSAGE and min(req.long_poll_ms, MAX_LONG_POLL_MS) > 0:
        return None
    return pull_body(result, ctx.config.max_frame_size, req.topic), -1


async def pull(ctx: ServerContext, session: Session, req: m.PullRequest) -> msgspec.Raw:
    """A :class:`~broker_lite.protocol.messages.PullResponse`, encoded (see :mod:`.fit`)."""
    _check_consume(session, req.topic, req.group)
    result = await long_poll_pull(ctx.broker, ctx.hub, req,
                                  min(req.long_poll_ms, MAX_LONG_POLL_MS))
    return pull_body(result, ctx.config.max_frame_size, req.topic)


async def query_assignment(ctx: ServerContext, session: Session,
                           req: m.QueryAssignmentRequest) -> m.Assignment:
    _check_consume(session, req.topic, req.group)
    return ctx.broker.query_assignment(req)


async def query_offset(ctx: ServerContext, session: Session,
                       req: m.OffsetRequest) -> m.OffsetResponse:
    _check_consume(session, req.topic, req.group)
    return m.OffsetResponse(offset=ctx.broker.query_offset(req))


async def update_offset(ctx: ServerContext, session: Session,
                        req: m.UpdateOffsetRequest) -> m.Empty:
    _check_consume(session, req.topic, req.group)
    ctx.broker.update_offset(req)
    return m.Empty()


def ack_now(ctx: ServerContext, session: Session, req: m.AckRequest) -> tuple[m.Empty, int]:
    _check_consume(session, req.topic, req.group)
    ctx.broker.ack(req)
    return m.Empty(), -1


async def ack(ctx: ServerContext, session: Session, req: m.AckRequest) -> m.Empty:
    return ack_now(ctx, session, req)[0]


async def send_back(ctx: ServerContext, session: Session, req: m.SendBackRequest) -> m.Empty:
    _check_consume(session, req.topic, req.group)
    end_offset = ctx.broker.send_back(req)
    await wait_flushed(ctx, end_offset)
    return m.Empty()


# -- admin ---------------------------------------------------------------------------


async def topic_create(ctx: ServerContext, session: Session,
                       req: m.TopicCreateRequest) -> m.TopicInfo:
    account = session.account
    if account is not None:
        account.check_create_topic(req.topic, exists=ctx.broker.topics.get(req.topic) is not None)
    return ctx.broker.create_topic(req)


async def topic_list(ctx: ServerContext, session: Session, req: m.Empty) -> m.TopicListResponse:
    """Every topic the account may send to, read, Get or List (all, without an ACL)."""
    account = session.account
    topics = ctx.broker.list_topics()
    if account is not None:
        topics = [t for t in topics if _may_see(account, t.topic)]
    return m.TopicListResponse(topics=topics)


def _may_see(account: Account, topic: str) -> bool:
    try:
        account.check_topic(topic, "Sub")
        return True
    except BrokerError:
        pass
    return any(account.allows("Topic", topic, action) for action in ("Pub", "Get", "List"))


async def topic_route(ctx: ServerContext, session: Session,
                      req: m.TopicRouteRequest) -> m.TopicInfo:
    account = session.account
    if account is not None and not _may_see(account, req.topic):
        account.check("Topic", req.topic, "Get", f"see the route of {req.topic!r}")
    return ctx.broker.topic_route(req.topic)


async def query_by_key(ctx: ServerContext, session: Session,
                       req: m.QueryByKeyRequest) -> m.QueryByKeyResponse:
    """Messages by key or id: only those whose real topic the account may read (an admin:
    all, as it may browse every queue with the operations requests)."""
    found = ctx.broker.query_by_key(req)
    account = session.account
    if account is not None and not account.admin:
        found = [msg for msg in found if account.may_read_message(msg.topic, msg.properties)]
    keep = fit(found, ctx.config.max_frame_size)
    return m.QueryByKeyResponse(messages=found[:keep])


HANDLERS: dict[int, Handler] = {
    RequestCode.HEARTBEAT: heartbeat,
    RequestCode.UNREGISTER_CLIENT: unregister,
    RequestCode.SEND_MESSAGE: send,
    RequestCode.SEND_BATCH: send_batch,
    RequestCode.PULL_MESSAGE: pull,
    RequestCode.QUERY_ASSIGNMENT: query_assignment,
    RequestCode.QUERY_CONSUMER_OFFSET: query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: update_offset,
    RequestCode.ACK_MESSAGE: ack,
    RequestCode.CONSUMER_SEND_BACK: send_back,
    RequestCode.END_TRANSACTION: end_transaction,
    RequestCode.END_TRANSACTION_BATCH: end_transaction_batch,
    RequestCode.TOPIC_CREATE: topic_create,
    RequestCode.TOPIC_LIST: topic_list,
    RequestCode.TOPIC_ROUTE: topic_route,
    RequestCode.QUERY_MESSAGE_BY_KEY: query_by_key,
}

#: the synchronous forms of the handlers of the most frequent requests (see the module
#: docstring); the connection uses one only while ``HANDLERS`` has the default handler
INLINE: dict[int, tuple[Handler, InlineHandler]] = {
    RequestCode.SEND_MESSAGE: (send, send_now),
    RequestCode.SEND_BATCH: (send_batch, send_batch_now),
    RequestCode.END_TRANSACTION: (end_transaction, end_transaction_now),
    RequestCode.END_TRANSACTION_BATCH: (end_transaction_batch, end_transaction_batch_now),
    RequestCode.PULL_MESSAGE: (pull, pull_now),
    RequestCode.ACK_MESSAGE: (ack, ack_now),
}

HANDLERS.update(OPS_HANDLERS)  # the operations requests (the console's)
