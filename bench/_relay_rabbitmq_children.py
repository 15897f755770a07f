"""The children of bench/relay.py's ``rabbitmq`` side (:mod:`_relay_rabbitmq`), by role.

``python bench/_relay_rabbitmq_children.py ROLE ...``, each told to start by a
file appearing (``go``) once it wrote its ``ready`` file:

* ``relay``: our relay with the RabbitMQ target, ``drain`` (every due row once,
  then exit) or ``loop`` (``run_once`` until SIGTERM);
* ``raw``: the client alone, aio-pika publishing with the target's properties,
  ``window`` in flight, confirmed, the ``exchange`` or the ``nowait`` way;
* ``alone``: the target alone, ``send_halves`` through its sync publisher, no
  database;
* ``producer``: commits ``rate`` rows a second, writing each commit's time.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import add_repository_paths
from _relay_common import PRODUCER_GROUP, body, paced

add_repository_paths()

__all__ = ["GO_TIMEOUT", "QUEUE", "main", "outbox_of"]

QUEUE = "BenchOrders"
GO_TIMEOUT = 120.0


def _await_go(go: Path) -> None:
    pause = threading.Event()
    deadline = time.monotonic() + GO_TIMEOUT
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{go} never appeared")
        pause.wait(0.001)


def outbox_of(db: str, broker: str) -> Any:
    from sqlalchemy import create_engine

    from outbox import Outbox

    return Outbox(engine=create_engine(db, pool_size=8), broker=broker,
                  producer_group=PRODUCER_GROUP)


def relay_main(db: str, broker: str, ready: str, go: str, mode: str) -> int:
    """``drain``: relay every due row once told to go, then exit; ``loop``: until SIGTERM."""
    from outbox import Relay
    from outbox.targets.choose import publisher_for
    from outbox.targets.runner import TargetPublisher

    outbox = outbox_of(db, broker)
    publisher = publisher_for(outbox)
    assert isinstance(publisher, TargetPublisher)
    publisher._call(publisher.target.start())  # connected before the clock starts
    Path(ready).touch()
    _await_go(Path(go))
    if mode == "drain":
        Relay(outbox, publisher).drain()
    else:
        idle = threading.Event()
        relay = Relay(outbox, publisher)
        while True:
            if not relay.run_once().claimed:
                idle.wait(0.001)
    publisher.close()
    return 0


def raw_main(broker: str, count: int, window: int, way: str, ready: str, go: str) -> int:
    """Publish ``count`` messages with aio-pika alone, ``window`` in flight, confirmed;
    ``way``: ``exchange`` (``Exchange.publish``) or ``nowait`` (aiormq's
    ``basic_publish(wait=False)``, each message on its own, as the client offers)."""
    import aio_pika

    from outbox.targets.base import OutgoingMessage
    from outbox.targets.rabbitmq_amqp import amqp_message, amqp_properties

    async def run() -> None:
        connection = await aio_pika.connect(broker, timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            exchange = channel.default_exchange
            underlay = await channel.get_underlay_channel()
            messages = [OutgoingMessage(f"raw-{i}", QUEUE, json.dumps(body(i)).encode(),
                                        None, (), None, {}) for i in range(count)]
            Path(ready).touch()
            await asyncio.to_thread(_await_go, Path(go))
            for start in range(0, count, window):
                chunk = messages[start:start + window]
                if way == "exchange":
                    await asyncio.gather(*(
                        exchange.publish(amqp_message(m, app_id=PRODUCER_GROUP),
                                         routing_key=QUEUE, mandatory=True, timeout=30)
                        for m in chunk))
                else:
                    await asyncio.gather(*(
                        underlay.basic_publish(  # type: ignore[call-arg]
                            m.body, routing_key=QUEUE, mandatory=True, wait=False,
                            properties=amqp_properties(m, app_id=PRODUCER_GROUP))
                        for m in chunk))

    asyncio.run(run())
    return 0


def alone_main(broker: str, count: int, batch: int, lanes: int, out: str) -> int:
    """The target alone: ``send_halves`` of ``batch`` rows at a time through its sync
    publisher, ``lanes`` callers at once (as the relay's lanes call it), no database;
    writes rows/s to ``out``."""
    from concurrent.futures import ThreadPoolExecutor

    from sqlalchemy import create_engine

    from outbox import Outbox
    from outbox.targets.base import HalfStored, OutgoingMessage
    from outbox.targets.choose import publisher_for

    messages = [OutgoingMessage(f"alone-{i}", QUEUE, json.dumps(body(i)).encode(), None, (),
                                None, {}) for i in range(count)]
    publisher = publisher_for(Outbox(engine=create_engine("sqlite://"), broker=broker,
                                     producer_group=PRODUCER_GROUP))
    publisher.send_halves(messages[:1])  # connected: not timed
    batches = [messages[s:s + batch] for s in range(1, count, batch)]

    def send(chunk: list[OutgoingMessage]) -> int:
        return sum(isinstance(o, HalfStored) for o in publisher.send_halves(chunk))

    t0 = time.monotonic()
    with ThreadPoolExecutor(lanes) as pool:
        stored = sum(pool.map(send, batches))
    seconds = time.monotonic() - t0
    publisher.close()
    Path(out).write_text(json.dumps({"per_s": stored / seconds, "stored": stored,
                                     "sent": count - 1}))
    return 0


def producer_main(db: str, broker: str, rate: float, seconds: float, out: str) -> int:
    """Commit ``rate`` rows a second for ``seconds``; write each commit's monotonic time."""
    from sqlalchemy.orm import Session

    from outbox import publish

    outbox = outbox_of(db, broker)
    committed: dict[int, float] = {}
    for i in paced(int(rate * seconds), rate):
        with Session(outbox.engine) as session, session.begin():
            publish(session, QUEUE, body(i), outbox=outbox)
        committed[i] = time.monotonic()
    Path(out).write_text(json.dumps(committed))
    return 0


def main(argv: list[str]) -> int:
    role, *rest = argv
    if role == "relay":
        return relay_main(*rest)
    if role == "raw":
        broker, count, window, way, ready, go = rest
        return raw_main(broker, int(count), int(window), way, ready, go)
    if role == "alone":
        broker, count, batch, lanes, out = rest
        return alone_main(broker, int(count), int(batch), int(lanes), out)
    if role == "producer":
        db, broker, rate, seconds, out = rest
        return producer_main(db, broker, float(rate), float(seconds), out)
    raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
