"""The native door's edge: the protocol's bodies to the core's model and back.

Pure functions, field for field (the native bodies were cut to the core's
shapes). The handlers call them on each request they hand the core and on
each answer they write; the gRPC door has its own edge
(:mod:`broker_lite.grpc_door.convert`), so neither door leans on the other's
format.
"""

from __future__ import annotations

from broker_lite.core import model
from broker_lite.protocol import messages as m

__all__ = ["check_out", "delivered_out", "end_in", "end_out", "message_in", "send_result_out"]


def message_in(wire: m.WireMessage) -> model.Message:
    return model.Message(
        topic=wire.topic, body=wire.body, tags=wire.tags, keys=wire.keys,
        properties=wire.properties, flag=wire.flag, msg_id=wire.msg_id, queue_id=wire.queue_id,
        sharding_key=wire.sharding_key, delay_level=wire.delay_level,
        deliver_at_ms=wire.deliver_at_ms, born_timestamp=wire.born_timestamp,
        transactional=wire.transactional)


def send_result_out(result: model.SendResult) -> m.SendResult:
    return m.SendResult(
        msg_id=result.msg_id, topic=result.topic, queue_id=result.queue_id,
        queue_offset=result.queue_offset, commit_log_offset=result.commit_log_offset,
        transaction_id=result.transaction_id, duplicate=result.duplicate)


def end_in(request: m.EndTransactionRequest) -> model.EndRequest:
    return model.EndRequest(
        producer_group=request.producer_group, transaction_id=request.transaction_id,
        state=request.state, commit_log_offset=request.commit_log_offset,
        queue_offset=request.queue_offset, msg_id=request.msg_id,
        from_check=request.from_check)


def end_out(result: model.EndResult) -> m.EndTransactionResponse:
    return m.EndTransactionResponse(
        outcome=result.outcome, already=result.already,
        commit_log_offset=result.commit_log_offset, queue_id=result.queue_id,
        queue_offset=result.queue_offset)


def delivered_out(view: model.DeliveredMessage) -> m.DeliveredMessage:
    return m.DeliveredMessage(
        msg_id=view.msg_id, topic=view.topic, queue_id=view.queue_id,
        queue_offset=view.queue_offset, commit_log_offset=view.commit_log_offset,
        body=view.body, tags=view.tags, keys=view.keys, properties=view.properties,
        born_timestamp=view.born_timestamp, store_timestamp=view.store_timestamp,
        reconsume_times=view.reconsume_times)


def check_out(request: model.CheckRequest) -> m.CheckTransactionRequest:
    return m.CheckTransactionRequest(
        producer_group=request.producer_group, transaction_id=request.transaction_id,
        msg_id=request.msg_id, commit_log_offset=request.commit_log_offset,
        queue_offset=request.queue_offset, check_times=request.check_times,
        message=delivered_out(request.message),
        renewed_commit_log_offset=request.renewed_commit_log_offset,
        renewed_queue_offset=request.renewed_queue_offset)
