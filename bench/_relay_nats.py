"""bench/relay.py's ``nats`` side: our relay with the NATS JetStream target.

The same relay worker as the ``ours`` side (``outbox.celery.run_worker``,
same settings), given ``nats://HOST:PORT`` of a private ``nats-server -js``
(file store, started as the tests start it: tests/support/nats_server.py),
with its own Celery queue (Redis database 2). Each run's topic gets its own
stream (``stream_settings``: the topic's subjects, file storage, the
duplicate window the relay's defaults need). The consumer is an ordered
push consumer of nats-py on the topic's subject, in this process.

:func:`raw_rate` is the client alone: nats-py publishing the same bodies
with the same headers (``Nats-Msg-Id``) to a fresh stream, every publish's
ack awaited, a window of publishes in flight (``js.publish`` or
``js.publish_async``, the best of a few window sizes): the confirmed-publish
rate the target is held to (>= 0.8x). :func:`target_rate` is the target
alone (``send_halves`` of the relay's batch size through its sync publisher,
as many callers at once as the relay has lanes, no database).
:func:`floor_line` prints them beside the SQL-only bound at the relay's batch
size (claim + mark, no broker: bench/_relay_legs.py), so the limit the
database puts on the relay on this machine shows next to the ratio.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["NATS_REDIS_DB", "WINDOWS", "consume_nats", "floor_line", "raw_rate", "target_rate"]

#: the nats side's Celery queue: this database of the run's Redis
NATS_REDIS_DB = 2
#: publishes in flight at once tried by :func:`raw_rate` (negative: with ``publish_async``)
WINDOWS = (1, 50, 200, 1000, -200, -1000)


async def _stream(js: Any, topic: str) -> None:
    from outbox import RelaySettings
    from outbox.targets.nats_stream import stream_settings

    await js.add_stream(**stream_settings(topic, [topic], RelaySettings()))


async def consume_nats(url: str, topic: str, add: Callable[[Sequence[bytes]], None],
                       stop: asyncio.Event, ready: asyncio.Event) -> None:
    """Create ``topic``'s stream, then read it with an ordered consumer until ``stop``."""
    import nats

    client = await nats.connect(url)
    try:
        js = client.jetstream(timeout=10)
        await _stream(js, topic)

        async def received(msg: Any) -> None:
            add([msg.data])

        sub = await js.subscribe(topic, stream=topic, cb=received, ordered_consumer=True)
        ready.set()
        await stop.wait()
        await sub.unsubscribe()
    finally:
        await client.close()


async def _raw_once(url: str, rows: int, window: int) -> float:
    import nats
    from _relay_common import body

    client = await nats.connect(url)
    try:
        js = client.jetstream(timeout=10)
        topic = f"RelayRaw{uuid.uuid4().hex[:10]}"
        await _stream(js, topic)
        payloads = [json.dumps(body(i), separators=(",", ":")).encode() for i in range(rows)]
        t0 = time.monotonic()
        for start in range(0, rows, abs(window)):
            chunk = range(start, min(rows, start + abs(window)))
            if window > 0:  # js.publish: one request each, awaited together
                await asyncio.gather(*(
                    js.publish(topic, payloads[i], headers={"Nats-Msg-Id": uuid.uuid4().hex},
                               stream=topic) for i in chunk))
            else:  # js.publish_async: all sent, then their acks awaited
                await asyncio.gather(*[
                    await js.publish_async(topic, payloads[i], stream=topic,
                                           headers={"Nats-Msg-Id": uuid.uuid4().hex})
                    for i in chunk])
        seconds = time.monotonic() - t0
        await js.delete_stream(topic)
        return rows / seconds
    finally:
        await client.close()


def target_rate(url: str, rows: int, batch: int = 200, lanes: int = 1) -> float:
    """The NATS target alone (no database, no Celery): ``send_halves`` of ``batch`` rows at a
    time through its sync publisher, as the relay calls it, ``lanes`` callers at once;
    rows/s."""
    from concurrent.futures import ThreadPoolExecutor

    import nats
    from _relay_common import body
    from sqlalchemy import create_engine

    from outbox import Outbox
    from outbox.targets.base import OutgoingMessage
    from outbox.targets.choose import publisher_for

    topic = f"RelayTarget{uuid.uuid4().hex[:10]}"

    async def setup(delete: bool = False) -> None:
        client = await nats.connect(url)
        try:
            js = client.jetstream(timeout=10)
            await (js.delete_stream(topic) if delete else _stream(js, topic))
        finally:
            await client.close()

    asyncio.run(setup())
    messages = [OutgoingMessage(tx_id=uuid.uuid4().hex, topic=topic,
                                body=json.dumps(body(i), separators=(",", ":")).encode(),
                                tag=None, keys=(), message_group=None, properties={})
                for i in range(rows)]
    publisher = publisher_for(Outbox(engine=create_engine("sqlite://"), broker=url))
    try:
        publisher.send_halves(messages[:1])  # connect and check the stream: not timed
        batches = [messages[start:start + batch] for start in range(1, rows, batch)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(lanes) as pool:
            list(pool.map(publisher.send_halves, batches))
        seconds = time.monotonic() - t0
    finally:
        publisher.close()
    asyncio.run(setup(delete=True))
    return (rows - 1) / seconds


def raw_rate(url: str, rows: int, batch: int = 200, lanes: int = 1) -> dict[str, Any]:
    """nats-py alone: its best confirmed-publish rate over :data:`WINDOWS`; and the target
    alone (:func:`target_rate`, ``batch`` rows a call, ``lanes`` at once) right after it."""
    trials = [{"window": w, "per_s": asyncio.run(_raw_once(url, rows, w))} for w in WINDOWS]
    best = max(trials, key=lambda t: float(t["per_s"]))
    return {"per_s": best["per_s"], "window": best["window"], "trials": trials,
            "target_alone_per_s": target_rate(url, rows, batch, lanes),
            "batch_size": batch, "lanes": lanes}


def floor_line(rep: int, relay_per_s: float, base: dict[str, Any],
               bound: dict[str, Any]) -> str:
    """One printed line: the relay's rows/s beside nats-py's raw rate, the target alone and
    the SQL-only bound at the relay's batch size, each as a multiple of the raw rate."""
    raw = float(base["per_s"])
    alone, sql = float(base["target_alone_per_s"]), float(bound["per_s"])
    # one process doing the SQL and the publishing one after the other, with no overlap
    serial = 1.0 / (1.0 / alone + 1.0 / sql) if alone and sql else 0.0
    return (f"  floor rep {rep} nats    : nats-py alone {raw:,.0f} msg/s; the relay "
            f"{relay_per_s:,.0f} rows/s = {relay_per_s / raw:.2f}x; the target alone "
            f"(send_halves of {base['batch_size']}, {base['lanes']} at once, no database) "
            f"{alone:,.0f} = {alone / raw:.2f}x; SQL only (claim + mark, batch "
            f"{bound['batch_size']}, no broker) {sql:,.0f} = {sql / raw:.2f}x; the two one "
            f"after the other {serial:,.0f} = {serial / raw:.2f}x")
