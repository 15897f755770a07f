"""The gRPC door's proxy mode (``--grpc-proxy-semantics``): RocketMQ 5's proxy, strictly.

By default the gRPC door is kinder than Apache RocketMQ 5's proxy: it ends a
transaction from its id alone, as often as asked, answers only once the end is
applied, and stores a half once per message id. Code written against it can
then pass here and fail on a RocketMQ cluster. In proxy mode the door does what
the proxy does instead (each point, and where RocketMQ does it, in
docs/grpc-proxy-semantics.md):

* a half's offsets are kept in this process only, for a window, and taken by
  the first EndTransaction (:mod:`~broker_lite.grpc_door.transaction_data`);
  without them the end fails with INTERNAL_SERVER_ERROR, "cannot found
  transaction data";
* EndTransaction is answered OK once handed to the broker, which applies it
  after the answer (the proxy's ``endTransactionOneway``): a refusal by the
  broker is only logged;
* a half is stored each time it is sent, even with a message id already stored;
* a request with more than one transactional message is refused, as RocketMQ's
  commit log refuses a transactional batch (MESSAGE_ILLEGAL, which the proxy
  reports as INTERNAL_SERVER_ERROR);
* a message must be of the type its topic takes (``message.type``; a topic
  without it is NORMAL): MESSAGE_PROPERTY_CONFLICT_WITH_TYPE otherwise, and the
  route tells clients that type alone;
* check-backs go only to producers that announced the topic in their settings.

Every half stored is logged on ``broker_lite.grpc.halves`` as one line,
``half stored {JSON}`` (topic, keys, transaction_id, message_id, queue_offset,
commit_log_offset), so a test counts the halves sent for a key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import msgspec
from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_lite.core import Broker
from broker_lite.core.model import CheckRequest, EndRequest, Message, SendResult
from broker_lite.core.topics import DLQ_PREFIX, RETRY_PREFIX
from broker_lite.errors import BrokerError
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.grpc_door.status import Code, GrpcDoorError
from broker_lite.grpc_door.transaction_data import TransactionData, TransactionDataTable

__all__ = ["HALVES_LOGGER", "NOT_FOUND", "ProxyMode", "accepted_types", "message_type"]

log = logging.getLogger("broker_lite.grpc")
halves_log = logging.getLogger("broker_lite.grpc.halves")

#: the logger of the one-line-per-half record
HALVES_LOGGER = "broker_lite.grpc.halves"
#: the proxy's message when an EndTransaction finds no transaction data
NOT_FOUND = "cannot found transaction data"

_ALL_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY,
              pb.MessageType.TRANSACTION)
_BY_NAME = {"NORMAL": (pb.MessageType.NORMAL,), "FIFO": (pb.MessageType.FIFO,),
            "DELAY": (pb.MessageType.DELAY,), "TRANSACTION": (pb.MessageType.TRANSACTION,),
            "MIXED": _ALL_TYPES}


def message_type(wire: Message) -> str:
    """A message's ``TopicMessageType``, in the order of ``parseFromMessageProperty``."""
    if wire.transactional:
        return "TRANSACTION"
    if wire.delay_level or wire.deliver_at_ms:
        return "DELAY"
    if wire.sharding_key:
        return "FIFO"
    return "NORMAL"


def accepted_types(topic_type: str) -> tuple[int, ...]:
    """What a route says a topic of ``topic_type`` accepts (``RouteActivity``)."""
    return _BY_NAME.get(topic_type, (pb.MessageType.MESSAGE_TYPE_UNSPECIFIED,))


class ProxyMode:
    """The proxy mode's state: the transaction data table, and its checks and hand-offs."""

    def __init__(self, broker: Broker, config: GrpcDoorConfig) -> None:
        self._broker = broker
        self.transactions = TransactionDataTable(
            expire_seconds=config.transaction_data_expire_seconds,
            max_per_key=config.transaction_data_max_num)

    def topic_type(self, topic: str) -> str:
        config = self._broker.topics.get(topic)
        return config.message_type if config is not None else "NORMAL"

    # -- SendMessage ---------------------------------------------------------------------

    def check_send(self, topic: str, wires: Sequence[Message]) -> None:
        """Refuse what the proxy (or the broker behind it) refuses; GrpcDoorError."""
        kind = message_type(wires[0])  # the proxy types a request by its first message
        if len(wires) > 1 and any(w.transactional for w in wires):
            raise GrpcDoorError(
                Code.INTERNAL_SERVER_ERROR,
                f"the message is illegal: a SendMessage of {len(wires)} messages with "
                "transactional ones; RocketMQ stores no transactional batch (its broker "
                "answers MESSAGE_ILLEGAL): send each half on its own")
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            return
        expected = self.topic_type(topic)
        if expected != "MIXED" and expected != kind:
            raise GrpcDoorError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {topic!r} takes {expected} messages, this one is {kind} (topic "
                f"attribute message.type; create it with -a +message.type={kind})")

    def half_stored(self, topic: str, wire: Message, result: SendResult) -> None:
        """Keep the half's transaction data, and log the one line a test counts."""
        self.transactions.add(topic, result.transaction_id,
                              commit_log_offset=result.commit_log_offset,
                              queue_offset=result.queue_offset)
        halves_log.info("half stored %s", json.dumps({
            "topic": topic, "keys": list(wire.keys), "transaction_id": result.transaction_id,
            "message_id": result.msg_id, "queue_offset": result.queue_offset,
            "commit_log_offset": result.commit_log_offset}, separators=(",", ":")))

    # -- check-back ----------------------------------------------------------------------

    def check_sent(self, request: CheckRequest) -> CheckRequest:
        """A check-back goes to a client: its answer may end the half, once, in the window.

        As RocketMQ's, the check names the half's copy it just renewed, not the
        first one: that copy's offsets are kept, and the message the client is
        shown carries that copy's queue offset.
        """
        commit_log_offset, queue_offset = request.commit_log_offset, request.queue_offset
        if request.renewed_commit_log_offset >= 0:
            commit_log_offset = request.renewed_commit_log_offset
            queue_offset = request.renewed_queue_offset
        self.transactions.add(request.producer_group, request.transaction_id,
                              commit_log_offset=commit_log_offset, queue_offset=queue_offset)
        message = msgspec.structs.replace(request.message, queue_offset=queue_offset,
                                          commit_log_offset=commit_log_offset)
        return msgspec.structs.replace(request, message=message)

    # -- EndTransaction ------------------------------------------------------------------

    def take(self, topic: str, transaction_id: str) -> TransactionData:
        """The transaction data an end needs, removed; INTERNAL_SERVER_ERROR without it."""
        data = self.transactions.poll(topic, transaction_id)
        if data is None:
            raise GrpcDoorError(
                Code.INTERNAL_SERVER_ERROR,
                f"{NOT_FOUND} for {topic}@{transaction_id}: it was used by an earlier end, "
                "or is older than the window, or was kept by another door process")
        return data

    def hand_off(self, loop: Any, request: EndRequest) -> None:
        """Apply the end after the answer, as the proxy's one-way request; failures logged."""
        loop.call_soon(self._apply, request)

    def _apply(self, request: EndRequest) -> None:
        try:
            self._broker.end_transaction(request)
        except BrokerError as exc:
            log.warning("end of transaction %s (state %d) not applied: %s",
                        request.transaction_id, request.state, exc)
        except Exception:
            log.exception("end of transaction %s failed", request.transaction_id)

    def housekeeping(self) -> None:
        dropped = self.transactions.expire()
        if dropped:
            log.debug("%d expired transaction data entries dropped", dropped)
