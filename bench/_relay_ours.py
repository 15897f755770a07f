"""bench/relay.py's ``ours`` side: our Celery relay worker, producer and broker_lite consumer.

The worker is ``outbox.celery.run_worker`` as ``rocketbox relay`` runs it
(beat off: the harness enqueues the sweeps); the producer writes rows with
``outbox.publish.publish``, a backlog or paced; the consumer long-polls the
topic's queues with ``AsyncPullConsumer``. The ``rocketmq`` side runs the
same worker and producer with another broker address
(``bench/_relay_rocketmq.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
import uuid
from pathlib import Path
from typing import Any

from _relay_common import (
    BACKLOG_TX,
    ENQUEUE_WINDOW_ENV,
    LISTEN_ENV,
    LISTEN_LANES_ENV,
    PRODUCER_GROUP,
    Env,
    Seen,
    body,
    child,
    paced,
    wait_ready,
)

__all__ = [
    "WORKER_SIDES",
    "celery_settings",
    "consume_ours",
    "ours_celery_app",
    "ours_listen",
    "ours_producer",
    "ours_relay_main",
    "start_ours_worker",
    "stop_ours_worker",
    "use_ours_worker",
]


def celery_settings() -> Any:
    from outbox.celery import CelerySettings

    # no beat schedule: the benchmark enqueues the sweep itself; one sweep drains any backlog
    settings = CelerySettings(sweep_interval=0, sweep_passes=1_000_000)
    window = os.environ.get(ENQUEUE_WINDOW_ENV)
    if window:
        settings = dataclasses.replace(settings, enqueue_window=float(window))
    lanes = os.environ.get(LISTEN_LANES_ENV)
    if lanes:
        settings = dataclasses.replace(settings, listen_lanes=int(lanes))
    # --listen / --no-listen (else the library's default): the wake-up or the tasks
    listen = os.environ.get(LISTEN_ENV)
    if listen:
        settings = dataclasses.replace(settings, listen=listen == "1")
    return settings


def ours_listen() -> bool:
    """Whether our relays ran with the wake-up (``CelerySettings.listen``) in this run."""
    return bool(celery_settings().listen)


def ours_celery_app(env: Env, side: str = "ours") -> Any:
    """The Celery app that enqueues our relay's sweeps for ``side`` (its broker and queue)."""
    from sqlalchemy import create_engine

    from outbox import Outbox
    from outbox.celery import make_celery

    broker, redis = env.relay_of(side)
    return make_celery(Outbox(engine=create_engine(env.db), broker=broker,
                              producer_group=PRODUCER_GROUP),
                       broker_url=redis, settings=celery_settings())


def ours_relay_main(args: argparse.Namespace) -> int:
    """The relay worker, as ``rocketbox relay`` runs it (beat off: the bench enqueues sweeps)."""
    from _relay_legs import ObservedPublisher, recorder, watch_worker_tasks
    from celery.signals import worker_ready
    from sqlalchemy import create_engine

    from outbox import Outbox, RelaySettings
    from outbox.celery import run_worker
    from outbox.targets.choose import publisher_for

    engine = create_engine(args.db, pool_size=args.concurrency + 2)
    outbox = Outbox(engine=engine, broker=args.broker, producer_group=PRODUCER_GROUP,
                    relay=RelaySettings(**{name: value for name, value in (
                        ("batch_size", args.batch_given), ("drain_lanes", args.lanes_given))
                        if value is not None}))

    def ready(**_kwargs: object) -> None:
        Path(args.ready).write_text("ready", encoding="utf-8")

    worker_ready.connect(ready, weak=False)
    rec = recorder()
    factory = None
    if rec is not None:  # the leg breakdown: a bench-only observer at the publisher seam
        watch_worker_tasks(rec)

        def factory(outbox: Outbox) -> Any:
            return ObservedPublisher(publisher_for(outbox), rec)

    return run_worker(outbox, celery_broker=args.redis, celery_backend=None,
                      concurrency=args.concurrency, sweeper=False, loglevel="WARNING",
                      checker=False,
                      settings=celery_settings(), publisher_factory=factory)


def ours_producer(args: argparse.Namespace) -> list[tuple[int, float, str]]:
    from sqlalchemy import create_engine, event
    from sqlalchemy.orm import Session, sessionmaker

    from outbox import Outbox
    from outbox.celery import celery_on_commit, make_celery
    from outbox.publish import publish

    engine = create_engine(args.db)
    outbox = Outbox(engine=engine, broker=args.broker, producer_group=PRODUCER_GROUP)
    if args.mode == "paced":
        from _relay_legs import recorder, watch_enqueues

        rec = recorder()
        if rec is not None:
            watch_enqueues(rec)
        app = make_celery(outbox, broker_url=args.redis, settings=celery_settings())
        outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))
        app.connection_for_write().ensure_connection()
    sessions = sessionmaker(engine)
    stamps: list[tuple[int, float, str]] = []
    if args.mode == "backlog":
        for start in range(0, args.count, BACKLOG_TX):
            with sessions.begin() as session:
                for i in range(start, min(args.count, start + BACKLOG_TX)):
                    publish(session, args.topic, body(i), outbox=outbox)
        return stamps
    committed: list[float] = []

    def stamp(_session: Session) -> None:
        committed.append(time.monotonic())

    for i in paced(args.count, args.rate):
        session = sessions()
        # registered before publish() adds the outbox's own hook: it runs first
        event.listen(session, "after_commit", stamp)
        with session, session.begin():
            tx_id = publish(session, args.topic, body(i), outbox=outbox)
        stamps.append((i, committed[-1], tx_id))
    return stamps


async def consume_ours(broker: str, topic: str, seen: Seen, stop: asyncio.Event,
                       ready: asyncio.Event) -> None:
    from broker_lite.client import AsyncAdmin, AsyncPullConsumer

    async with AsyncAdmin(broker) as admin:
        info = await admin.create_topic(topic)
    queues = info.queues
    consumer = AsyncPullConsumer(f"{PRODUCER_GROUP}-consumer", broker)
    await consumer.start()

    async def one(queue_id: int) -> None:
        offset = 0
        while not stop.is_set():
            result = await consumer.pull(topic, queue_id, offset, 256, long_poll_ms=500)
            if result.messages:
                seen.add([msg.body for msg in result.messages])
            offset = result.next_offset

    try:
        tasks = [asyncio.create_task(one(q)) for q in range(queues)]
        ready.set()
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await consumer.shutdown()


def start_ours_worker(env: Env, concurrency: int, batch_size: int | None,
                      drain_lanes: int | None, side: str = "ours") -> None:
    """Our relay worker for ``side`` (ours: broker_lite's native door; rocketmq: the proxy);
    ``batch_size`` or ``drain_lanes`` None: the target's own default, else the library's."""
    ready = env.work / f"{side}-ready-{uuid.uuid4().hex[:8]}"
    broker, redis = env.relay_of(side)
    proc = child("ours-relay", "--db", env.db, "--redis", redis, "--broker", broker,
                 "--ready", str(ready), "--concurrency", str(concurrency),
                 *(("--batch-size", str(batch_size)) if batch_size else ()),
                 *(("--drain-lanes", str(drain_lanes)) if drain_lanes else ()),
                 env=env, log_name=f"{side}-relay.log")
    if side == "rocketmq":
        env.rocketmq_worker = proc
    elif side == "nats":
        env.nats_worker = proc
    else:
        env.ours_worker = proc
    asyncio.run(wait_ready(ready, proc))


def stop_ours_worker(env: Env, side: str | None = None) -> None:
    """Stop our relay worker of ``side`` (None: of every side)."""
    for name in WORKER_SIDES if side is None else (side,):
        attr = f"{name}_worker"
        proc = getattr(env, attr)
        if proc is not None:
            proc.stop(timeout=20)
        setattr(env, attr, None)


#: the sides that run one of our relay workers
WORKER_SIDES = ("ours", "rocketmq", "nats")


def use_ours_worker(env: Env, side: str, concurrency: int, batch_size: int | None,
                    drain_lanes: int | None) -> None:
    """Before a run of ``side``: only its worker runs (none for the peer's runs is needed).

    Every worker of ours listens to the one table's wake-ups (``pg_notify`` in the
    row's INSERT) and claims any due row, whatever its topic: two of them alive at
    once would relay each other's rows to the wrong broker.
    """
    if side not in WORKER_SIDES:
        return
    for other in WORKER_SIDES:
        if other != side:
            stop_ours_worker(env, other)
    if getattr(env, f"{side}_worker") is None:
        start_ours_worker(env, concurrency, batch_size, drain_lanes, side)
