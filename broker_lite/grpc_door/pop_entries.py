"""What the gRPC door holds of one received message: its entry, its queue's state, its handle.

:class:`~broker_lite.grpc_door.pop.PopService` keeps one :class:`QueueState` per
``(group, topic, queue)``, holding an :class:`Entry` per message read and not yet
settled. A receipt handle is ``QUEUE:OFFSET:TOKEN``: where the message is, and the
token of its current delivery (a new one each time it is received or its
invisible duration changes), so a stale handle is told from the current one.
A :class:`ReceiveSpec` says what one receive asks for; a :class:`Delivery` is one
message it returns. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker_lite.core.model import DeliveredMessage
from broker_lite.grpc_door.status import Code, GrpcDoorError

__all__ = ["Delivery", "Entry", "QueueState", "ReceiveSpec", "make_handle", "parse_handle"]


@dataclass(slots=True)
class Entry:
    """One message read for a group and not yet settled."""

    offset: int
    message: DeliveredMessage
    group: str | None
    attempts: int = 0
    token: str = ""
    deadline: float = 0.0  # monotonic; 0 while visible
    invisible_ms: int = 0
    client_id: str = ""
    auto_renew: bool = False
    held_since: float = 0.0


@dataclass(slots=True)
class QueueState:
    """What is in flight on one (group, topic, queue), and where reading goes on."""

    next_offset: int
    entries: dict[int, Entry] = field(default_factory=dict)
    pending: list[int] = field(default_factory=list)
    timers: list[tuple[float, int, str]] = field(default_factory=list)
    busy_groups: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReceiveSpec:
    """One receive: who, what, how many, and for how long they stay invisible."""

    group: str
    topic: str
    batch: int
    invisible_ms: int
    client_id: str
    max_attempts: int
    tag_expr: str = "*"
    auto_renew: bool = False
    start_queue: int = 0


@dataclass(frozen=True, slots=True)
class Delivery:
    message: DeliveredMessage
    receipt_handle: str
    attempt: int
    invisible_ms: int



def make_handle(queue_id: int, entry: Entry) -> str:
    return f"{queue_id}:{entry.offset}:{entry.token}"


def parse_handle(handle: str) -> tuple[int, int, str]:
    parts = handle.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or not parts[2]:
        raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                            f"receipt handle {handle[:80]!r} is not one this broker issued")
    return int(parts[0]), int(parts[1]), parts[2]
