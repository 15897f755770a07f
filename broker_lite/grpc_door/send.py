"""SendMessage and EndTransaction: the producer's side of the gRPC door.

A send stores each message through ``Broker.send`` (NORMAL, FIFO with its
message group as the sharding key, DELAY with its delivery time, and halves of
TRANSACTION messages) and, with ``--flush sync``, answers only once the
message is on disk, as the native door does. Every message of a request is
checked first (:func:`~broker_lite.grpc_door.convert.to_message`); one bad
message fails the whole request with its code, nothing stored, as in
RocketMQ's proxy. Each stored message gets its own ``SendResultEntry``; the
response's status is their common code, or MULTIPLE_RESULTS.

A transactional message is a half whose producer group is its topic (the
proxy's convention: a gRPC ``EndTransactionRequest`` names the topic, not a
group). Its transaction id is its message id. EndTransaction with source
CLIENT or SERVER_CHECK goes to ``Broker.end_transaction`` (``from_check`` for
the latter), which is idempotent: a repeated COMMIT is OK, a conflicting
resolution is refused with BAD_REQUEST.

In proxy mode (``--grpc-proxy-semantics``, :mod:`~broker_lite.grpc_door.
proxy_mode`) a send is first checked as the proxy checks it (no transactional
batch, the topic's message type), every half is stored even under a message id
already stored, and its transaction data is kept; an end takes that data (or
fails without it) and is answered OK once handed to the broker.
"""

from __future__ import annotations

import time
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.core.model import EndRequest, Message, Sent, TxState
from broker_lite.errors import BrokerError
from broker_lite.grpc_door.auth import Caller, check_end, check_send
from broker_lite.grpc_door.convert import to_message
from broker_lite.grpc_door.door import GrpcDoor
from broker_lite.grpc_door.route import validate_topic_name
from broker_lite.grpc_door.status import Code, GrpcDoorError, ok, status, status_for
from broker_lite.serving.durability import wait_flushed
from broker_lite.storage.inflate import InflateBudget

__all__ = ["end_transaction", "send_message"]

_STATES = {int(pb.TransactionResolution.COMMIT): TxState.COMMIT,
           int(pb.TransactionResolution.ROLLBACK): TxState.ROLLBACK}


def _overall(codes: set[int]) -> Any:
    if len(codes) == 1:
        return status(codes.pop())
    return status(Code.MULTIPLE_RESULTS)


def _track_transactional(door: GrpcDoor, caller: Caller, topic: str) -> None:
    """The sender's Telemetry stream answers check-backs for the topic's halves."""
    info = door.clients.get(caller.client_id)
    if info is not None and topic not in info.topics:
        info.topics.add(topic)
        door.register(info)


async def send_message(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    if not len(request.messages):
        raise GrpcDoorError(Code.MESSAGE_CORRUPTED, "no message to send")
    first = request.messages[0].topic
    topic = validate_topic_name(first.name)
    broker = door.broker
    check_send(caller.account, topic, creates=broker.config.auto_create_topics
               and broker.topics.get(topic) is None)
    max_body = door.broker.config.store.max_message_size
    now = int(time.time() * 1000)
    # compression never lets a request carry more than an uncompressed one could
    budget = InflateBudget(max_body + (1 << 20))
    wires: list[Message] = []
    for message in request.messages:
        if message.topic.name != topic:
            raise GrpcDoorError(Code.MESSAGE_CORRUPTED,
                                "every message of one request must have the same topic")
        wires.append(to_message(message, config=door.config, max_body=max_body, now_ms=now,
                                budget=budget))
    proxy = door.proxy
    if proxy is not None:
        proxy.check_send(topic, wires)
    elif any(w.transactional for w in wires):
        _track_transactional(door, caller, topic)
    outcomes: list[Sent | BrokerError]
    if len(wires) == 1:
        outcomes = [door.broker.send(topic, wires[0], born_host=caller.peer,
                                     dedupe=proxy is None)]
    else:
        outcomes = door.broker.send_batch(topic, wires, born_host=caller.peer)
    if proxy is not None:  # logged and kept as soon as stored, before any flush wait
        for wire, outcome in zip(wires, outcomes, strict=True):
            if wire.transactional and isinstance(outcome, Sent):
                proxy.half_stored(topic, wire, outcome.result)
    ends = [o.end_offset for o in outcomes if isinstance(o, Sent)]
    if ends:
        await wait_flushed(door.ctx, max(ends))
    entries = []
    for outcome in outcomes:
        if isinstance(outcome, Sent):
            result = outcome.result
            entries.append(spb.SendResultEntry(
                status=ok(), message_id=result.msg_id, transaction_id=result.transaction_id,
                offset=result.queue_offset))
        else:
            entries.append(spb.SendResultEntry(status=status_for(outcome)))
    return spb.SendMessageResponse(status=_overall({e.status.code for e in entries}),
                                   entries=entries)


async def end_transaction(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    topic = validate_topic_name(request.topic.name)
    transaction_id = request.transaction_id.strip()
    if not transaction_id:
        raise GrpcDoorError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
    if caller.account is not None:
        check_end(caller.account, topic, door.broker.transaction_topic(transaction_id))
    state = _STATES.get(int(request.resolution), TxState.UNKNOWN)
    from_check = request.source == pb.TransactionSource.SOURCE_SERVER_CHECK
    if door.proxy is not None:
        data = door.proxy.take(topic, transaction_id)
        door.proxy.hand_off(door.ctx.loop, EndRequest(
            producer_group=topic, transaction_id=transaction_id, state=state,
            commit_log_offset=data.commit_log_offset, queue_offset=data.queue_offset,
            msg_id=request.message_id, from_check=from_check))
        return spb.EndTransactionResponse(status=ok())
    ended = door.broker.end_transaction(EndRequest(
        producer_group=topic, transaction_id=transaction_id, state=state,
        msg_id=request.message_id, from_check=from_check))
    await wait_flushed(door.ctx, ended.end_offset)
    return spb.EndTransactionResponse(status=ok())
