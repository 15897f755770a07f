"""ReceiveMessage (server streaming, long polling), AckMessage, ChangeInvisibleDuration
and ForwardMessageToDeadLetterQueue, over :class:`~broker_lite.grpc_door.pop.PopService`.

A receive answers the way RocketMQ's proxy writes it
(``ReceiveMessageResponseStreamWriter``): a status (OK, or MESSAGE_NOT_FOUND
when long polling ended empty, which the client takes as "no message"), then
one response per message, then a ``delivery_timestamp``, then the end of the
stream.

* The queue of the request only says where to start: a receive pops every
  queue of the topic (the proxy's assignments say id -1, "all queues").
* Long polling waits up to the request's ``long_polling_timeout`` (capped by
  ``max_long_polling_seconds`` and by the call's deadline, less a margin so
  the answer arrives in time), waking on arrivals, on acks and invisibility
  changes of the topic, and at the next invisibility deadline.
* ``auto_renew`` (push consumers) holds messages with
  ``auto_renew_invisible_seconds``, renewed while the client is connected;
  otherwise ``invisible_duration`` is required, in (0, ``max_invisible``].
* If the stream breaks before a message was written, that message becomes
  visible again after 1 s (the proxy's nack on a failed write).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.grpc_door.auth import Caller, check_consume
from broker_lite.grpc_door.convert import duration_ms, to_proto
from broker_lite.grpc_door.door import GrpcDoor
from broker_lite.grpc_door.pop import Delivery, ReceiveSpec
from broker_lite.grpc_door.route import validate_group, validate_topic_name
from broker_lite.grpc_door.settings import tag_expression
from broker_lite.grpc_door.status import Code, GrpcDoorError, ok, status, status_for
from broker_lite.serving.durability import wait_flushed

__all__ = ["ack_message", "change_invisible_duration", "forward_to_dlq", "receive_message"]

log = logging.getLogger("broker_lite.grpc")

#: the answer must reach the client before its deadline: stop polling this much earlier
_DEADLINE_MARGIN = 0.3
_NACK_MS = 1000
_rotation = itertools.count()


def _invisible_ms(door: GrpcDoor, request: Any) -> int:
    if request.auto_renew:
        return int(door.config.auto_renew_invisible_seconds * 1000)
    if not request.HasField("invisible_duration"):
        raise GrpcDoorError(Code.ILLEGAL_INVISIBLE_TIME,
                            "invisible_duration is required unless auto_renew is set")
    return _checked_invisible(door, duration_ms(request.invisible_duration), minimum=1)


def _checked_invisible(door: GrpcDoor, millis: int, *, minimum: int) -> int:
    limit = int(door.config.max_invisible_seconds * 1000)
    if millis < minimum:
        raise GrpcDoorError(Code.ILLEGAL_INVISIBLE_TIME,
                            f"the invisible duration {millis} ms is too small (min {minimum} ms)")
    if millis > limit:
        raise GrpcDoorError(Code.ILLEGAL_INVISIBLE_TIME,
                            f"the invisible duration {millis} ms is too large (max {limit} ms)")
    return millis


def _polling_seconds(door: GrpcDoor, request: Any, context: Any) -> float:
    wanted = door.config.max_long_polling_seconds
    if request.HasField("long_polling_timeout"):
        wanted = min(wanted, duration_ms(request.long_polling_timeout) / 1000)
    remaining = context.time_remaining()
    if remaining is not None:
        if remaining <= _DEADLINE_MARGIN:
            raise GrpcDoorError(Code.ILLEGAL_POLLING_TIME,
                                "the call's deadline leaves no time to poll")
        wanted = min(wanted, remaining - _DEADLINE_MARGIN)
    return max(0.0, wanted)


def _spec(door: GrpcDoor, caller: Caller, request: Any) -> ReceiveSpec:
    topic = validate_topic_name(request.message_queue.topic.name)
    group = validate_group(request.group.name)
    check_consume(caller.account, topic, group)
    if request.batch_size <= 0:
        raise GrpcDoorError(Code.BAD_REQUEST, f"batch_size must be positive, got "
                                              f"{request.batch_size}")
    queue_id = request.message_queue.id
    return ReceiveSpec(
        group=group, topic=topic, batch=min(request.batch_size, door.config.receive_batch_size),
        invisible_ms=_invisible_ms(door, request), client_id=caller.client_id,
        max_attempts=door.config.max_delivery_attempts,
        tag_expr=tag_expression(request.filter_expression), auto_renew=request.auto_renew,
        start_queue=queue_id if queue_id >= 0 else next(_rotation))


async def _poll(door: GrpcDoor, spec: ReceiveSpec, seconds: float) -> list[Delivery]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        future = door.waker.register(spec.topic)
        try:
            found = door.pop.receive(spec)
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            wake = door.pop.next_deadline(spec.group, spec.topic)
            if wake is not None:
                remaining = min(remaining, max(0.0, wake - time.monotonic()) + 0.001)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, remaining)
        finally:
            door.waker.unregister(spec.topic, future)


async def receive_message(door: GrpcDoor, caller: Caller, request: Any,
                          context: Any) -> AsyncIterator[Any]:
    try:
        spec = _spec(door, caller, request)
        found = await _poll(door, spec, _polling_seconds(door, request, context))
    except Exception as exc:
        yield spb.ReceiveMessageResponse(status=status_for(exc, what="ReceiveMessage"))
        yield _delivery_timestamp()
        return
    if not found:
        yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
    else:
        written = 0
        try:
            yield spb.ReceiveMessageResponse(status=ok())
            for delivery in found:
                yield spb.ReceiveMessageResponse(message=to_proto(
                    delivery.message, store_host=door.store_host,
                    receipt_handle=delivery.receipt_handle,
                    delivery_attempt=delivery.attempt, invisible_ms=delivery.invisible_ms))
                written += 1
        except BaseException:
            _nack(door, spec, found[written:])
            raise
    yield _delivery_timestamp()


def _delivery_timestamp() -> Any:
    """The last response of a receive: the broker's time (the client's latency metric)."""
    response = spb.ReceiveMessageResponse()
    response.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
    return response


def _nack(door: GrpcDoor, spec: ReceiveSpec, unwritten: list[Delivery]) -> None:
    for delivery in unwritten:
        with contextlib.suppress(GrpcDoorError):
            door.pop.change_invisible(spec.group, spec.topic, delivery.receipt_handle, "",
                                      _NACK_MS)
    if unwritten:
        log.info("receive of %s/%s broke off: %d message(s) visible again in 1 s", spec.group,
                 spec.topic, len(unwritten))


def _consumer(caller: Caller, request: Any) -> tuple[str, str]:
    topic = validate_topic_name(request.topic.name)
    group = validate_group(request.group.name)
    check_consume(caller.account, topic, group)
    return group, topic


def ack_message(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    group, topic = _consumer(caller, request)
    if not len(request.entries):
        raise GrpcDoorError(Code.BAD_REQUEST, "no entries to ack")
    entries = []
    for entry in request.entries:
        try:
            door.pop.ack(group, topic, entry.receipt_handle, entry.message_id)
            result = ok()
        except Exception as exc:
            result = status_for(exc, what="AckMessage")
        entries.append(spb.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result))
    door.waker.wake_now(topic)  # a FIFO message group may be free again
    codes = {e.status.code for e in entries}
    overall = status(codes.pop()) if len(codes) == 1 else status(Code.MULTIPLE_RESULTS)
    return spb.AckMessageResponse(status=overall, entries=entries)


def change_invisible_duration(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    group, topic = _consumer(caller, request)
    millis = _checked_invisible(door, duration_ms(request.invisible_duration), minimum=0)
    handle = door.pop.change_invisible(group, topic, request.receipt_handle,
                                       request.message_id, millis)
    door.waker.wake_now(topic)
    return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)


async def forward_to_dlq(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    group, topic = _consumer(caller, request)
    end = door.pop.forward_to_dlq(group, topic, request.receipt_handle, request.message_id)
    door.waker.wake_now(topic)
    if end:
        await wait_flushed(door.ctx, end)
    return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())
