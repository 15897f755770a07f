"""QueryRoute and QueryAssignment: which queues a topic has, and where they are.

broker_lite is one broker, so a route is the topic's queues, all on this
broker (``Broker.name`` = ``--broker-name``, id 0: the master), at the
endpoints the client used to reach the door (RocketMQ's proxy answers with
the request's endpoints too, so NAT and wildcard binds work). Each queue's
``permission`` follows the topic's perm (READ_WRITE, READ or WRITE), and it
accepts every message type (NORMAL, FIFO, DELAY, TRANSACTION: RocketMQ's
``MIXED`` topics), whatever the topic's ``message.type`` attribute says; in
proxy mode (``--grpc-proxy-semantics``) it accepts only that type, as the
proxy's ``RouteActivity`` answers, so the official client refuses a message
of another type before sending it.

A topic that does not exist yet gets a route of ``--default-queues`` queues
when topics are auto-created (the first send creates it: RocketMQ's
``TBW102`` behaviour), and TOPIC_NOT_FOUND otherwise. A route never creates a
topic.

Assignments follow the proxy for non-FIFO groups: one "queue" with id -1,
meaning "every queue of the topic"; a receive pops from all of them, so no
rebalancing is needed between the members of a group.
"""

from __future__ import annotations

import re
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.core.topics import PERM_READ, PERM_WRITE
from broker_lite.errors import InvalidMessageError, TopicNotFoundError
from broker_lite.grpc_door.auth import Caller, check_consume, check_route
from broker_lite.grpc_door.door import GrpcDoor
from broker_lite.grpc_door.proxy_mode import accepted_types
from broker_lite.grpc_door.status import Code, GrpcDoorError, ok
from broker_lite.values.names import SYSTEM_GROUP_PREFIX, is_system_topic, validate_topic

__all__ = ["query_assignment", "query_route", "validate_group", "validate_topic_name"]

ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY,
                  pb.MessageType.TRANSACTION)
_GROUP = re.compile(r"^[%a-zA-Z0-9_-]{1,255}$")


def validate_topic_name(name: str) -> str:
    """RocketMQ's topic rule, and no system topic: ILLEGAL_TOPIC otherwise."""
    if not name:
        raise GrpcDoorError(Code.ILLEGAL_TOPIC, "topic name cannot be empty")
    try:
        validate_topic(name)
    except InvalidMessageError as exc:
        raise GrpcDoorError(Code.ILLEGAL_TOPIC, str(exc)) from None
    if is_system_topic(name):
        raise GrpcDoorError(Code.ILLEGAL_TOPIC, f"cannot access system topic {name!r}")
    return name


def validate_group(name: str) -> str:
    if not _GROUP.match(name or ""):
        raise GrpcDoorError(Code.ILLEGAL_CONSUMER_GROUP,
                            f"consumer group {name!r} must be 1 to 255 characters from "
                            "[%a-zA-Z0-9_-]")
    if name.startswith(SYSTEM_GROUP_PREFIX):
        raise GrpcDoorError(Code.ILLEGAL_CONSUMER_GROUP, f"cannot use system group {name!r}")
    return name


def _permission(perm: int) -> int:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return int(pb.Permission.READ_WRITE)
    if readable:
        return int(pb.Permission.READ)
    return int(pb.Permission.WRITE if writable else pb.Permission.NONE)


def _endpoints(door: GrpcDoor, requested: Any) -> Any:
    if len(requested.addresses):
        return requested
    host, port = door.address
    scheme = pb.AddressScheme.IPv6 if ":" in host else pb.AddressScheme.IPv4
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host.strip("[]"), port=port)])


def _topic_shape(door: GrpcDoor, topic: str) -> tuple[int, int]:
    """``(queues, perm)`` of a topic, or of the topic its first send would create."""
    config = door.broker.topics.get(topic)
    if config is not None:
        return config.queues, config.perm
    if not door.broker.config.auto_create_topics:
        raise TopicNotFoundError(topic, hint=" (auto-create is off; create it first)")
    return door.broker.config.default_queues, PERM_READ | PERM_WRITE


def _accepted(door: GrpcDoor, topic: str) -> tuple[int, ...]:
    if door.proxy is None:
        return ACCEPTED_TYPES
    return accepted_types(door.proxy.topic_type(topic))


def query_route(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    topic = validate_topic_name(request.topic.name)
    check_route(caller.account, topic)
    queues, perm = _topic_shape(door, topic)
    broker = pb.Broker(name=door.broker.config.broker_name, id=0,
                       endpoints=_endpoints(door, request.endpoints))
    resource = pb.Resource(name=topic, resource_namespace=request.topic.resource_namespace)
    permission = _permission(perm)
    accepted = _accepted(door, topic)
    return spb.QueryRouteResponse(status=ok(), message_queues=[
        pb.MessageQueue(topic=resource, id=queue_id, permission=permission, broker=broker,
                        accept_message_types=accepted)
        for queue_id in range(queues)])


def query_assignment(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    topic = validate_topic_name(request.topic.name)
    group = validate_group(request.group.name)
    check_consume(caller.account, topic, group)
    _queues, perm = _topic_shape(door, topic)
    if not perm & PERM_READ:
        return spb.QueryAssignmentResponse(status=pb.Status(
            code=Code.FORBIDDEN, message=f"topic {topic!r} has no readable queue"))
    broker = pb.Broker(name=door.broker.config.broker_name, id=0,
                       endpoints=_endpoints(door, request.endpoints))
    queue = pb.MessageQueue(
        topic=pb.Resource(name=topic, resource_namespace=request.topic.resource_namespace),
        id=-1, permission=_permission(perm), broker=broker,
        accept_message_types=_accepted(door, topic))
    return spb.QueryAssignmentResponse(status=ok(),
                                       assignments=[pb.Assignment(message_queue=queue)])
