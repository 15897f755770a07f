"""The clients of the gRPC door, and the ``Settings`` the door answers them.

A v5 client opens a Telemetry stream to each endpoint and writes its
``Settings`` there: a producer's ``publishing`` (its topics), or a consumer's
``subscription`` (group, topics and filter expressions). The door keeps them
per client id and answers with the settings the client expects back, the way
RocketMQ's ``GrpcClientSettingsManager`` merges them:

* producers get the send retry policy (``max_attempts`` 3, exponential
  back-off 10 ms to 1 s, times 2), the largest body the broker stores, and
  ``validate_message_type`` (the route accepts every type, see
  :mod:`~broker_lite.grpc_door.route`);
* consumers get ``receive_batch_size``, the long-polling timeout, ``fifo``
  (false: per-message-group order is kept by the broker, see
  :mod:`~broker_lite.grpc_door.pop`) and the retry policy: ``max_attempts``
  (the door's ``max_delivery_attempts``) and RocketMQ's customized back-off
  (the delay levels 1 s ... 2 h, scaled by ``--delay-time-scale``, never
  under 1 s because the client reads whole seconds).

The settings decide what the core learns (``Broker.register``): a producer's
topics are its producer groups, because a gRPC producer ends its
transactions with the topic as the group (RocketMQ's proxy does the same), so
check-backs of a topic's halves reach its producers' Telemetry streams.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_lite.core.filtering import parse_tag_expr
from broker_lite.core.model import ClientRegistration, Subscription
from broker_lite.core.schedule import DELAY_LEVELS_MS
from broker_lite.errors import RequestError
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.grpc_door.status import Code, GrpcDoorError

__all__ = ["ClientInfo", "ClientRegistry", "answer_settings", "tag_expression"]

PRODUCER = int(pb.ClientType.PRODUCER)
CONSUMERS = frozenset({int(pb.ClientType.PUSH_CONSUMER), int(pb.ClientType.SIMPLE_CONSUMER)})


def tag_expression(expression: Any) -> str:
    """A ``FilterExpression`` as the core's tag expression; SQL92 is refused."""
    if expression.type == pb.FilterType.SQL:
        raise GrpcDoorError(Code.ILLEGAL_FILTER_EXPRESSION,
                            "SQL92 filter expressions are not supported by broker_lite; "
                            "use a TAG expression such as 'TagA || TagB'")
    text = expression.expression.strip() or "*"
    try:
        parse_tag_expr(text)
    except RequestError as exc:
        raise GrpcDoorError(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
    return text


@dataclass(slots=True)
class ClientInfo:
    """What the door knows of one client."""

    client_id: str
    client_type: int
    settings: Any
    last_seen: float
    #: a producer's topics (= its producer groups)
    topics: set[str] = field(default_factory=set)
    #: a consumer's group and its subscriptions (topic -> tag expression)
    group: str = ""
    subscriptions: dict[str, str] = field(default_factory=dict)
    #: the Telemetry stream the client is connected by (a core ``Channel``)
    channel: Any = None

    def registration(self) -> ClientRegistration:
        """How the core's client registry should see this client."""
        if self.client_type == PRODUCER:
            return ClientRegistration(client_id=self.client_id,
                                      producer_groups=sorted(self.topics))
        return ClientRegistration(client_id=self.client_id, subscriptions=[
            Subscription(group=self.group, topic=topic, tag_expr=expr)
            for topic, expr in sorted(self.subscriptions.items())])


class ClientRegistry:
    """Clients by id; a client is alive while its Telemetry stream is open, or it beats."""

    def __init__(self, expiry_seconds: float) -> None:
        self._expiry = expiry_seconds
        self._clients: dict[str, ClientInfo] = {}

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def update(self, client_id: str, settings: Any, channel: Any) -> ClientInfo:
        """Store the settings a client sent on its Telemetry stream; GrpcDoorError if bad."""
        kind = settings.client_type if settings.HasField("client_type") else 0
        pub_sub = settings.WhichOneof("pub_sub")
        if pub_sub is None:
            raise GrpcDoorError(Code.BAD_REQUEST,
                                "settings carry neither publishing nor subscription")
        if kind != PRODUCER and kind not in CONSUMERS:
            raise GrpcDoorError(Code.UNRECOGNIZED_CLIENT_TYPE,
                                f"client type {pb.ClientType.Name(kind)} is not supported "
                                "(PRODUCER, PUSH_CONSUMER and SIMPLE_CONSUMER are)")
        info = ClientInfo(client_id=client_id, client_type=kind, settings=settings,
                          last_seen=time.monotonic(), channel=channel)
        if pub_sub == "publishing":
            info.topics = {t.name for t in settings.publishing.topics if t.name}
        else:
            info.group = settings.subscription.group.name
            info.subscriptions = {entry.topic.name: tag_expression(entry.expression)
                                  for entry in settings.subscription.subscriptions}
        old = self._clients.get(client_id)
        if old is not None and old.client_type == PRODUCER == kind:
            info.topics |= old.topics  # topics it sent transactions to are kept
        self._clients[client_id] = info
        return info

    def touch(self, client_id: str) -> ClientInfo | None:
        info = self._clients.get(client_id)
        if info is not None:
            info.last_seen = time.monotonic()
        return info

    def remove(self, client_id: str) -> ClientInfo | None:
        return self._clients.pop(client_id, None)

    def alive(self, client_id: str) -> bool:
        info = self._clients.get(client_id)
        if info is None:
            return False
        if info.channel is not None and info.channel.is_alive():
            return True
        return time.monotonic() - info.last_seen < self._expiry

    def channel_closed(self, channel: Any) -> ClientInfo | None:
        """Forget the stream; the client is kept until it beats no more (or says goodbye)."""
        for info in self._clients.values():
            if info.channel is channel:
                info.channel = None
                return info
        return None

    def expire(self) -> list[str]:
        cutoff = time.monotonic() - self._expiry
        gone = [cid for cid, info in self._clients.items()
                if info.last_seen < cutoff and (info.channel is None
                                                or not info.channel.is_alive())]
        for cid in gone:
            del self._clients[cid]
        return gone


def answer_settings(info: ClientInfo, config: GrpcDoorConfig, *, max_body_size: int,
                    delay_time_scale: float) -> Any:
    """The settings a client is told: its own, merged with the broker's."""
    answer = pb.Settings()
    answer.CopyFrom(info.settings)
    answer.metric.Clear()
    answer.metric.on = False
    policy = answer.backoff_policy
    if info.client_type == PRODUCER:
        policy.max_attempts = config.producer_max_attempts
        policy.exponential_backoff.initial.FromMilliseconds(10)
        policy.exponential_backoff.max.FromMilliseconds(1000)
        policy.exponential_backoff.multiplier = 2.0
        answer.publishing.max_body_size = max_body_size
        answer.publishing.validate_message_type = True
        return answer
    sub = answer.subscription
    sub.receive_batch_size = config.receive_batch_size
    sub.long_polling_timeout.FromMilliseconds(int(config.max_long_polling_seconds * 1000))
    sub.fifo = False
    policy.max_attempts = config.max_delivery_attempts
    for ms in DELAY_LEVELS_MS:
        policy.customized_backoff.next.add(seconds=max(1, round(ms * delay_time_scale / 1000)))
    return answer
