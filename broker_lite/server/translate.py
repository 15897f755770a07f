"""The native door's edge: the protocol's bodies to the core's model and back.

Pure functions, field for field (the native bodies were cut to the core's
shapes), named ``*_in`` (a request body to the core's value) and ``*_out``
(the core's answer to a response body). The handlers call them on each
request they hand the core and on each answer they write; the gRPC door has
its own edge (:mod:`broker_lite.grpc_door.convert`), so neither door leans on
the other's format. Where a body only wraps one value (an offset, a list of
messages), the handler wraps the core's answer itself; a pull's answer is not
copied at all but written as the core gave it (:func:`broker_lite.server.fit.pull_body`).
"""

from __future__ import annotations

from broker_lite.core import model
from broker_lite.protocol import messages as m

__all__ = [
    "ack_in",
    "assignment_out",
    "assignment_query_in",
    "check_out",
    "delivered_out",
    "end_in",
    "end_out",
    "key_query_in",
    "message_in",
    "new_topic_in",
    "offset_query_in",
    "offset_update_in",
    "pull_in",
    "registration_in",
    "send_back_in",
    "send_result_out",
    "topic_info_out",
]


# -- producing and transactions ------------------------------------------------------


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


# -- consuming -----------------------------------------------------------------------


def pull_in(request: m.PullRequest) -> model.PullQuery:
    """The core's part of a PULL (its ``long_poll_ms`` is the door's to honour)."""
    return model.PullQuery(
        group=request.group, topic=request.topic, queue_id=request.queue_id,
        offset=request.offset, max_messages=request.max_messages, tag_expr=request.tag_expr)


def ack_in(request: m.AckRequest) -> model.Ack:
    return model.Ack(
        group=request.group, topic=request.topic, queue_id=request.queue_id,
        queue_offset=request.queue_offset, msg_id=request.msg_id)


def send_back_in(request: m.SendBackRequest) -> model.SendBack:
    return model.SendBack(
        group=request.group, topic=request.topic, queue_id=request.queue_id,
        queue_offset=request.queue_offset, msg_id=request.msg_id,
        delay_level=request.delay_level, max_reconsume_times=request.max_reconsume_times)


def offset_query_in(request: m.OffsetRequest) -> model.OffsetQuery:
    return model.OffsetQuery(group=request.group, topic=request.topic,
                             queue_id=request.queue_id)


def offset_update_in(request: m.UpdateOffsetRequest) -> model.OffsetUpdate:
    return model.OffsetUpdate(group=request.group, topic=request.topic,
                              queue_id=request.queue_id, offset=request.offset)


def assignment_query_in(request: m.QueryAssignmentRequest) -> model.AssignmentQuery:
    return model.AssignmentQuery(client_id=request.client_id, group=request.group,
                                 topic=request.topic)


def assignment_out(assignment: model.Assignment) -> m.Assignment:
    return m.Assignment(topic=assignment.topic, queue_ids=assignment.queue_ids,
                        broadcasting=assignment.broadcasting)


# -- clients -------------------------------------------------------------------------


def registration_in(request: m.HeartbeatRequest) -> model.ClientRegistration:
    return model.ClientRegistration(
        client_id=request.client_id, producer_groups=request.producer_groups,
        subscriptions=[model.Subscription(group=sub.group, topic=sub.topic,
                                          tag_expr=sub.tag_expr, broadcasting=sub.broadcasting)
                       for sub in request.consumers])


# -- admin ---------------------------------------------------------------------------


def new_topic_in(request: m.TopicCreateRequest) -> model.NewTopic:
    return model.NewTopic(
        topic=request.topic, queues=request.queues, perm=request.perm,
        attributes=request.attributes, removed_attributes=request.removed_attributes)


def topic_info_out(info: model.TopicInfo) -> m.TopicInfo:
    return m.TopicInfo(topic=info.topic, queues=info.queues, perm=info.perm,
                       max_offsets=info.max_offsets, attributes=info.attributes)


def key_query_in(request: m.QueryByKeyRequest) -> model.KeyQuery:
    return model.KeyQuery(key=request.key, max_messages=request.max_messages)
