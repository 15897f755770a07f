"""The load of a chaos run: a producer writing units of work, a consumer group reading them.

**Producer** (a child process, ``chaos.py --role producer``): ``--threads``
threads, each on a fixed schedule of ``rate / threads`` transactions per
second, as a web app would: a SQLAlchemy session inserts a ``chaos_unit`` row
and ``publish()`` es one message naming it, in one transaction, through the
Celery ``on_commit`` hook (Redis). A seeded share of them raises before the
commit instead (rolled back). A unit that fails (PostgreSQL restarting, the
link cut) is recorded as ``error``: the database alone says whether it
committed; why it failed goes to ``<out>.failures.json`` (counts by exception
type and first line, a few examples of each with the second they happened),
so a run that committed little says what stopped it. A slot more than a
second late is skipped, not caught up in a burst.
Each line of the output file is ``[unit, outcome, monotonic time]``, the time
of the commit (an ``after_commit`` listener registered before the outbox's
own hook, so the hook's enqueue counts as latency).

**Consumer**: a broker_lite pull consumer group in a thread of the driver,
reading every queue of the topic from offset 0 straight from the broker (not
through a proxy), retrying while the broker is down; it keeps the first
monotonic time each unit was seen and counts redeliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _chaos_cluster import READY_TIMEOUT, Cluster, python_env

from procgroup import Process

__all__ = ["TOPIC", "Consumer", "producer_main", "read_units", "start_producer",
           "wait_relaying"]

TOPIC = "ChaosUnits"
GROUP = "chaos"
UNIT_RE = re.compile(rb'"u":\s*"([^"]+)"')
_PAD = "x" * 160


class _Rollback(Exception):
    """Raised inside a unit of work to roll it back."""


def _paced(rate: float, seconds: float) -> Iterator[int]:
    start = time.monotonic()
    i = 0
    while True:
        due = start + i / rate
        if due - start >= seconds:
            return
        late = time.monotonic() - due
        if late > 1.0:  # an outage: skip the missed slots, do not burst
            i += int(late * rate)
            continue
        if late < 0:
            time.sleep(-late)
        yield i
        i += 1


#: examples kept per failure kind
FAILURE_EXAMPLES = 3


def failure_kind(exc: BaseException) -> str:
    """``Type: first line`` with numbers and addresses folded, so like failures group."""
    first = (str(exc).strip().splitlines() or [""])[0]
    folded = re.sub(r"\d+", "N", re.sub(r"0x[0-9a-f]+", "0x", first))[:160]
    return f"{type(exc).__name__}: {folded}"


def _worker(args: argparse.Namespace, thread: int, out: list[list[Any]],
            failures: list[tuple[str, float, str]]) -> None:
    from sqlalchemy import create_engine, event, text
    from sqlalchemy.orm import Session, sessionmaker

    from outbox import Outbox
    from outbox.celery import CelerySettings, celery_on_commit, make_celery
    from outbox.publish import publish

    engine = create_engine(args.db, pool_pre_ping=True, pool_size=2,
                           connect_args={"connect_timeout": 5})
    outbox = Outbox(engine=engine, broker=args.broker)
    app = make_celery(outbox, broker_url=args.redis, settings=CelerySettings())
    outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))
    sessions = sessionmaker(engine)
    rng = random.Random(f"{args.seed}-{thread}")
    insert = text("INSERT INTO chaos_unit (unit_id) VALUES (:u)")
    for i in _paced(args.rate / args.threads, args.seconds):
        unit = f"{args.seed}-{thread}-{i}"
        rollback = rng.random() < args.rollback
        stamp: list[float] = []

        def committed(_session: Session, _stamp: list[float] = stamp) -> None:
            _stamp.append(time.monotonic())

        session = sessions()
        event.listen(session, "after_commit", committed)
        try:
            with session, session.begin():
                session.execute(insert, {"u": unit})
                publish(session, TOPIC, {"u": unit, "pad": _PAD}, outbox=outbox)
                if rollback:
                    raise _Rollback
            out.append([unit, "commit", stamp[0]])
        except _Rollback:
            out.append([unit, "rollback", time.monotonic()])
        except Exception as exc:
            at = stamp[0] if stamp else time.monotonic()
            out.append([unit, "error", at])
            failures.append((failure_kind(exc), at, f"{type(exc).__name__}: {exc}"[:500]))
    engine.dispose()


def producer_main(args: argparse.Namespace) -> int:
    results: list[list[list[Any]]] = [[] for _ in range(args.threads)]
    failures: list[tuple[str, float, str]] = []  # list.append is atomic: one list for all
    threads = [threading.Thread(target=_worker, args=(args, t, results[t], failures),
                                daemon=True)
               for t in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with open(args.out, "w", encoding="utf-8") as fh:
        for rows in results:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    kinds: dict[str, dict[str, Any]] = {}
    for kind, at, text in failures:
        entry = kinds.setdefault(kind, {"count": 0, "first_at": at, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < FAILURE_EXAMPLES:
            entry["examples"].append({"at": at, "error": text})
    Path(f"{args.out}.failures.json").write_text(json.dumps(kinds, indent=1), encoding="utf-8")
    return 0


def read_failures(units: Path) -> dict[str, dict[str, Any]]:
    """What :func:`producer_main` wrote about its failed units (empty when none failed)."""
    path = Path(f"{units}.failures.json")
    if not path.exists():
        return {}
    kinds: dict[str, dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return dict(sorted(kinds.items(), key=lambda kv: -int(kv[1]["count"])))


def start_producer(c: Cluster, args: argparse.Namespace, seed: int,
                   out: Path) -> Process:
    """``chaos.py --role producer`` for ``args.seconds`` at ``args.rate``, through the
    app-to-PostgreSQL proxy; its log is ``producer.log`` in the run's directory."""
    argv = [sys.executable, str(Path(__file__).with_name("chaos.py")), "--role", "producer",
            "--db", c.app_db_url, "--redis", c.redis_url, "--broker", c.broker_native,
            "--out", str(out), "--rate", str(args.rate), "--seconds", str(args.seconds),
            "--threads", str(args.threads), "--seed", str(seed),
            "--rollback", str(args.rollback)]
    return Process(argv, log=c.work / "producer.log", env=python_env(), name="producer").start()


def wait_relaying(c: Cluster, consumer: Consumer, timeout: float = READY_TIMEOUT) -> float:
    """Publish one probe unit (no hook: the sweeper takes it) and wait until the consumer
    sees it: the relay, its beat and the broker all work. Returns the seconds it took."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import sessionmaker

    from outbox import Outbox
    from outbox.publish import publish

    engine = create_engine(c.db_url)
    outbox = Outbox(engine=engine, broker=c.broker_native)
    start = time.monotonic()
    try:
        with sessionmaker(engine).begin() as session:
            session.execute(text("INSERT INTO chaos_unit (unit_id) VALUES ('probe')"))
            publish(session, TOPIC, {"u": "probe"}, outbox=outbox)
    finally:
        engine.dispose()
    while "probe" not in consumer.seen():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"the relay relayed nothing within {timeout:.0f} s; see "
                               f"{c.relay.log_path}")
        time.sleep(0.2)
    return round(time.monotonic() - start, 1)


def read_units(path: Path) -> list[tuple[str, str, float]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            unit, outcome, at = json.loads(line)
            rows.append((str(unit), str(outcome), float(at)))
    return rows


class Consumer:
    """The consumer group, in a thread with its own event loop."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.first_seen: dict[str, float] = {}
        self.redeliveries = 0
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True,
                                        name="chaos-consumer")

    def __enter__(self) -> Consumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def seen(self) -> dict[str, float]:
        with self._lock:
            return dict(self.first_seen)

    def _add(self, bodies: list[bytes]) -> None:
        now = time.monotonic()
        with self._lock:
            for raw in bodies:
                match = UNIT_RE.search(raw)
                if match is None:
                    continue
                unit = match.group(1).decode()
                if unit in self.first_seen:
                    self.redeliveries += 1
                else:
                    self.first_seen[unit] = now

    async def _run(self) -> None:
        from broker_lite.client import AsyncAdmin, AsyncPullConsumer

        async with AsyncAdmin(self.broker) as admin:
            queues = (await admin.create_topic(TOPIC)).queues
        offsets = dict.fromkeys(range(queues), 0)
        while not self._stop.is_set():
            consumer = AsyncPullConsumer(GROUP, self.broker)
            try:
                await consumer.start()
                while not self._stop.is_set():
                    results = await asyncio.gather(*(
                        consumer.pull(TOPIC, q, offsets[q], 256, long_poll_ms=200)
                        for q in offsets))
                    for q, result in zip(offsets, results, strict=True):
                        if result.messages:
                            self._add([msg.body for msg in result.messages])
                        offsets[q] = result.next_offset
            except Exception:  # the broker is down or restarting: try again shortly
                self.errors += 1
                await asyncio.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    await consumer.shutdown()
