"""Helpers for the NATS target's tests: streams, what a stream holds, an inbox consumer.

Everything talks to the real nats-server (tests/support/nats_server.py)
through nats-py; each helper opens its own connection and closes it, and
every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
from nats.js import JetStreamContext
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings
from outbox.inbox_nats import NatsInbox
from outbox.models import transaction_table as t
from outbox.targets.nats_stream import stream_settings

T = TypeVar("T")


def fast_relay(**changes: Any) -> RelaySettings:
    """Fast retries; the longest retry (so the duplicate window asked for) is short."""
    return RelaySettings(**{"batch_size": 50, "lease_seconds": 2.0, "max_attempts": 3,
                            "backoff_base": 0.01, "backoff_max": 0.05, "jitter": 0.0,
                            "broker_timeout": 2.0, **changes})


def run(url: str, work: Callable[[JetStreamContext], Coroutine[Any, Any, T]]) -> T:
    """``await work(js)`` on a fresh connection to ``url``."""

    async def go() -> T:
        client = await nats.connect(url, connect_timeout=5)
        try:
            return await work(client.jetstream(timeout=10))
        finally:
            await client.close()

    return asyncio.run(go())


def create_stream(url: str, name: str, topics: list[str], relay: RelaySettings,
                  **changes: Any) -> None:
    """A stream for ``topics`` as docs/nats.md says (``changes`` override its settings)."""

    async def add(js: JetStreamContext) -> None:
        await js.add_stream(**{**stream_settings(name, topics, relay), **changes})

    run(url, add)


@dataclass(frozen=True)
class Stored:
    seq: int
    subject: str
    body: bytes
    headers: dict[str, str]

    @property
    def tx_id(self) -> str:
        return self.headers.get("Nats-Msg-Id", "")


def stored(url: str, stream: str) -> list[Stored]:
    """Every message ``stream`` holds now, in sequence order."""

    async def read(js: JetStreamContext) -> list[Stored]:
        info = await js.stream_info(stream)
        out = []
        for seq in range(int(info.state.first_seq or 1), int(info.state.last_seq or 0) + 1):
            msg = await js.get_msg(stream, seq)
            out.append(Stored(seq, str(msg.subject), msg.data or b"", dict(msg.headers or {})))
        return out

    return run(url, read)


def consume(url: str, stream: str, durable: str, inbox: NatsInbox, *, until: Callable[[], bool],
            timeout: float, ack_wait: float = 30.0,
            on_message: Callable[[Any], bool] | None = None) -> None:
    """Fetch from ``durable`` (a pull consumer, explicit acks) into ``inbox.consume`` until
    ``until()``; ``on_message(msg)`` False skips the inbox (the consumer "crashed")."""

    async def go(js: JetStreamContext) -> None:
        from nats.js.api import ConsumerConfig

        sub = await js.pull_subscribe("", durable=durable, stream=stream,
                                      config=ConsumerConfig(ack_wait=ack_wait))
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError(f"{durable}: condition not met in {timeout:.0f}s "
                                     f"(inbox counts {inbox.counts})")
            try:
                batch = await sub.fetch(16, timeout=1.0)
            except nats.errors.TimeoutError:
                continue
            for msg in batch:
                if on_message is None or on_message(msg):
                    await inbox.consume(msg)
        await sub.unsubscribe()

    run(url, go)


def committed(outbox: Outbox, topic: str, count: int, *, group: str | None = None,
              **extra: Any) -> list[str]:
    """``count`` rows of ``topic``, one transaction each; their ids in commit order."""
    from outbox.publish import publish

    ids = []
    for i in range(count):
        with Session(outbox.engine) as session, session.begin():
            ids.append(publish(session, topic, {"i": i}, outbox=outbox, message_group=group,
                               **extra))
    return ids


def relayed(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_not(None)))
                   .scalars())


def row_errors(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return {tx_id: error for tx_id, error in conn.execute(select(t.c.tx_id, t.c.last_error))}
