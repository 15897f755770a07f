"""Connected clients: producer channels for check-back, consumer groups for rebalance.

Producers register their groups with heartbeats; the transaction check service
picks a live channel of the half's producer group, round robin. Consumers
register their subscriptions; each member of a clustering group gets an even
share of a topic's queues (RocketMQ's "allocate averagely"), recomputed
whenever members join or leave.

Under an ACL a client id is bound to the account that registered it: while
its channel is alive another account's heartbeat under that id is refused,
and an unregister only forgets the id for the channel that registered it.
A check-back goes only to a channel that says it may act for the half's
producer group and topic (``Channel.may_check``, which the doors answer from
the channel's account).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from broker_lite.core.log_safe import printable
from broker_lite.core.model import CheckRequest, ClientRegistration, Subscription
from broker_lite.errors import NoPermissionError

__all__ = ["Channel", "ClientRegistry", "allocate_averagely"]


class Channel(Protocol):
    """A live connection the broker can send a check-back request on."""

    client_id: str
    remote_address: str

    def is_alive(self) -> bool: ...

    def send_check(self, request: CheckRequest) -> None: ...


def _owner(channel: Channel) -> str | None:
    """The access key a channel authenticated with (``None`` without an ACL)."""
    account = getattr(channel, "account", None)
    key = getattr(account, "access_key", None)
    return key if isinstance(key, str) else None


def _may_check(channel: Channel, group: str, topic: str) -> bool:
    """Whether ``channel`` may get the check-back (and the body) of a half of ``topic``
    sent by ``group``. A channel that cannot say (an in-process one, no ACL) may."""
    may_check = getattr(channel, "may_check", None)
    return True if may_check is None else bool(may_check(group, topic))


@dataclass
class _Client:
    client_id: str
    channel: Channel
    last_seen: float
    producer_groups: set[str] = field(default_factory=set)
    subscriptions: dict[tuple[str, str], Subscription] = field(default_factory=dict)


def allocate_averagely(queues: list[int], members: list[str], me: str) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous, even shares in member order."""
    if me not in members or not queues:
        return []
    index = members.index(me)
    n, k = len(queues), len(members)
    share = n // k + (1 if index < n % k else 0)
    start = index * (n // k) + min(index, n % k)
    return queues[start : start + share]


class ClientRegistry:
    def __init__(self, expiry_seconds: float) -> None:
        self._expiry = expiry_seconds
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        self._rr: dict[str, int] = {}

    def register(self, registration: ClientRegistration, channel: Channel) -> None:
        now = time.monotonic()
        with self._lock:
            client = self._clients.get(registration.client_id)
            if (client is not None and client.channel is not channel
                    and client.channel.is_alive() and _owner(client.channel) != _owner(channel)):
                raise NoPermissionError(
                    f"client id {printable(registration.client_id)!r} is in use by another "
                    "account's connection; pick a client id of your own")
            if client is None or client.channel is not channel:
                client = _Client(registration.client_id, channel, now)
                self._clients[registration.client_id] = client
            client.last_seen = now
            client.producer_groups = set(registration.producer_groups)
            client.subscriptions = {(s.group, s.topic): s for s in registration.subscriptions}

    def unregister(self, client_id: str, channel: Channel | None = None) -> None:
        """Forget ``client_id``; given a ``channel``, only if that channel registered it."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None and (channel is None or client.channel is channel):
                del self._clients[client_id]

    def channel_closed(self, channel: Channel) -> None:
        with self._lock:
            for cid in [c.client_id for c in self._clients.values() if c.channel is channel]:
                del self._clients[cid]

    def expire(self) -> list[str]:
        cutoff = time.monotonic() - self._expiry
        with self._lock:
            gone = [c.client_id for c in self._clients.values()
                    if c.last_seen < cutoff or not c.channel.is_alive()]
            for cid in gone:
                del self._clients[cid]
        return gone

    def snapshot(self) -> list[tuple[str, str, list[str], list[Subscription]]]:
        """``(client id, remote address, producer groups, subscriptions)`` of each connected
        client, sorted by id (for operators)."""
        with self._lock:
            clients = sorted(self._clients.values(), key=lambda c: c.client_id)
            return [(c.client_id, c.channel.remote_address, sorted(c.producer_groups),
                     list(c.subscriptions.values())) for c in clients]

    def producer_channel(self, group: str, topic: str | None = None) -> Channel | None:
        """A live channel of ``group``, round robin; ``None`` when none is online.

        Given the half's ``topic``, only a channel allowed to act for ``group``
        on that topic (see the module docstring).
        """
        with self._lock:
            live = sorted(
                (c for c in self._clients.values()
                 if group in c.producer_groups and c.channel.is_alive()
                 and (topic is None or _may_check(c.channel, group, topic))),
                key=lambda c: c.client_id,
            )
            if not live:
                return None
            turn = self._rr.get(group, 0)
            self._rr[group] = turn + 1
            return live[turn % len(live)].channel

    def members(self, group: str, topic: str) -> tuple[list[str], bool]:
        """Client ids subscribed to ``topic`` in ``group``, sorted; and broadcasting?"""
        with self._lock:
            subs = [(c.client_id, c.subscriptions[(group, topic)]) for c in self._clients.values()
                    if (group, topic) in c.subscriptions]
        broadcasting = any(s.broadcasting for _cid, s in subs)
        return sorted(cid for cid, _s in subs), broadcasting
