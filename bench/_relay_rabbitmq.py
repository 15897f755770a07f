"""bench/relay.py's ``rabbitmq`` side: our relay with the RabbitMQ target, and aio-pika alone.

It runs before the other sides, on servers of its own: a private PostgreSQL
cluster (the outbox table) and a rabbitmq-server node, both as the tests
start them (tests/support), and one durable quorum queue. The consumer is
aio-pika in this process (``no_ack``), recording when each body's ``i`` first
arrived (:class:`_relay_common.Seen`).

* **throughput**: N rows are committed first; a relay child
  (``Relay.drain``, the library's lanes and batch size, the target's one
  connection and its confirming channels) is told to go, and the clock stops
  when the consumer has the last of the N. Rate = N / that time.
* **client**: in the same repetition, a child publishes N messages with the target's
  properties (``amqp_properties``) with aio-pika alone, persistent and
  mandatory on a confirming channel, ``window`` of them in flight at once,
  two ways: aio-pika's ``Exchange.publish`` (``Message``, each publish
  waiting for the socket to drain) and ``basic_publish(wait=False)`` on
  aio-pika's underlying aiormq channel (the target's way until it wrote a
  wave as one, outbox/targets/rabbitmq_wave.py), timed the same way. The
  relay and the client's runs go in an order that rotates every repetition,
  each after ``os.sync()``; the client's rate is its best way and window by
  the median over the repetitions: the raw
  confirmed-publish rate the target is held to (issue 32: ours >= 0.8x of it).
* **the floor**, printed beside them: the target alone (``send_halves`` of a
  relay batch through its sync publisher, as many callers at once as the
  relay has lanes, no database) and the SQL-only bound at the relay's batch
  size (claim + mark, bench/_relay_legs.py, no broker) on a fresh backlog.
* **latency**: a producer child commits ``--rate`` rows a second (one per
  transaction) for ``--seconds``, while a relay child loops ``run_once``
  (a 1 ms pause when nothing was due); commit-to-visible = the consumer's
  receipt minus the producer's commit (``time.monotonic()``, one clock for
  every process on Linux), the first second left out.

The children (the relay, the client alone, the target alone, the producer)
are :mod:`_relay_rabbitmq_children`: ``python bench/_relay_rabbitmq_children.py ROLE ...``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, add_repository_paths, median, settle
from _relay_common import Seen, body
from _relay_rabbitmq_children import GO_TIMEOUT, QUEUE, outbox_of

add_repository_paths()

from procgroup import Process  # noqa: E402

__all__ = ["QUEUE", "rabbitmq_side"]

#: windows (messages in flight) the client baseline tries, each way; the best counts
WINDOWS = (200, 1000)
#: the client's two ways of publishing: aio-pika's Exchange.publish, and basic_publish(wait=False)
WAYS = ("exchange", "nowait")
#: the file the children run (``python bench/_relay_rabbitmq_children.py ROLE ...``)
CHILDREN = Path(__file__).resolve().with_name("_relay_rabbitmq_children.py")


def _script(role: str, *args: str, log: Path) -> Process:
    argv = [sys.executable, str(CHILDREN), role, *args]
    return Process(argv, log=log, name=f"rabbitmq-{role}",
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()


def _wait_file(path: Path, proc: Process, timeout: float = GO_TIMEOUT) -> None:
    proc.wait_until(path.exists, timeout, what=f"{path.name} written", interval=0.005)


# -- the harness -----------------------------------------------------------------------------


class _Consumer:
    """aio-pika on a thread of its own (its own loop), recording what arrived."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen = Seen()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(60)

    async def _start(self) -> None:
        import aio_pika

        self.seen = Seen()  # its event belongs to this loop
        self._connection = await aio_pika.connect(self.url, timeout=10)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=2000)
        queue = await channel.get_queue(QUEUE, ensure=False)

        async def on_message(message: Any) -> None:
            self.seen.add([message.body])

        await queue.consume(on_message, no_ack=True)

    def reset(self) -> None:
        asyncio.run_coroutine_threadsafe(self._reset(), self._loop).result(10)

    async def _reset(self) -> None:
        self.seen.times.clear()
        self.seen.duplicates = 0

    def wait_for(self, count: int, timeout: float) -> bool:
        return asyncio.run_coroutine_threadsafe(self.seen.wait_for(count, timeout),
                                                self._loop).result(timeout + 10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._connection.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextmanager
def _servers(work: Path) -> Iterator[tuple[str, str]]:
    from tests.support.outbox_db import pg_outbox_database
    from tests.support.rabbitmq_server import start_rabbitmq
    from tests.support.servers import start_postgres
    from tests.targets.rabbitmq.rabbit_support import declare

    with start_postgres() as pg, start_rabbitmq() as rabbit, \
            pg_outbox_database(pg, "rabbitbench") as (engine, db):
        engine.dispose()
        declare(rabbit.url, QUEUE, "quorum")
        yield db, rabbit.url


def _truncate(db: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(db)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE rocketbox_transaction"))
    engine.dispose()


def _commit_backlog(db: str, broker: str, rows: int) -> None:
    from sqlalchemy.orm import Session

    from outbox import publish

    outbox = outbox_of(db, broker)
    for start in range(0, rows, 500):
        with Session(outbox.engine) as session, session.begin():
            for i in range(start, min(rows, start + 500)):
                publish(session, QUEUE, body(i), outbox=outbox)
    outbox.engine.dispose()


def _timed(consumer: _Consumer, proc: Process, ready: Path, go: Path, count: int,
           timeout: float) -> dict[str, Any]:
    _wait_file(ready, proc)
    started = time.monotonic()
    go.touch()
    complete = consumer.wait_for(count, timeout)
    seconds = time.monotonic() - started
    proc.wait(timeout=60) if complete else proc.stop()
    return {"per_s": count / seconds if complete else 0.0, "seconds": seconds,
            "missing": count - len(consumer.seen.times), "duplicates": consumer.seen.duplicates}


def _throughput(work: Path, db: str, url: str, consumer: _Consumer, rows: int, timeout: float,
                n: int) -> dict[str, Any]:
    _truncate(db)
    _commit_backlog(db, url, rows)
    consumer.reset()
    ready, go = work / f"relay-ready-{n}", work / f"relay-go-{n}"
    proc = _script("relay", db, url, str(ready), str(go), "drain", log=work / f"relay-{n}.log")
    return _timed(consumer, proc, ready, go, rows, timeout)


def _raw(work: Path, url: str, consumer: _Consumer, rows: int, timeout: float, n: int,
         way: str, window: int) -> dict[str, Any]:
    """One run of the client alone: ``rows`` messages, ``window`` in flight, ``way``."""
    consumer.reset()
    tag = f"{n}-{way}-{window}"
    ready, go = work / f"raw-ready-{tag}", work / f"raw-go-{tag}"
    proc = _script("raw", url, str(rows), str(window), way, str(ready), str(go),
                   log=work / f"raw-{tag}.log")
    return {"way": way, "window": window, **_timed(consumer, proc, ready, go, rows, timeout)}


def _rep(work: Path, db: str, url: str, consumer: _Consumer, rows: int, timeout: float,
         n: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One repetition: the relay and each way and window of the client, in an order that
    rotates every repetition (so none always runs right after another's backlog)."""
    runs: list[str | tuple[str, int]] = ["relay", *((w, k) for w in WAYS for k in WINDOWS)]
    shift = n % len(runs)
    relay: dict[str, Any] = {}
    trials: list[dict[str, Any]] = []
    for run in runs[shift:] + runs[:shift]:
        settle()
        if isinstance(run, tuple):
            trials.append(_raw(work, url, consumer, rows, timeout, n, *run))
        else:
            relay = _throughput(work, db, url, consumer, rows, timeout, n)
    trials.sort(key=lambda t: (WAYS.index(t["way"]), t["window"]))
    return relay, trials


def _client_summary(raw: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The client's rate: its best way and window by the median over the repetitions
    (not the best single run, which on a busy machine is mostly the luckiest)."""
    by_config: dict[tuple[str, int], list[float]] = {}
    for trials in raw:
        for t in trials:
            by_config.setdefault((t["way"], t["window"]), []).append(t["per_s"])
    medians = {config: median(rates) for config, rates in by_config.items()}
    (way, window), per_s = max(medians.items(), key=lambda item: item[1])
    return {"way": way, "window": window, "per_s": per_s,
            "medians": [{"way": w, "window": k, "per_s": v} for (w, k), v in medians.items()],
            "runs": by_config[(way, window)]}


def _floor(work: Path, db: str, url: str, consumer: _Consumer, rows: int, timeout: float,
           n: int) -> dict[str, Any]:
    """The target alone, then the SQL-only bound at the relay's batch size (fresh backlog)."""
    from _relay_legs import sql_bound

    from outbox import RelaySettings

    settings = RelaySettings()
    out = work / f"alone-{n}.json"
    consumer.reset()
    _script("alone", url, str(rows), str(settings.batch_size), str(settings.drain_lanes),
            str(out), log=work / f"alone-{n}.log").wait(timeout=timeout)
    alone = json.loads(out.read_text())
    consumer.wait_for(rows, timeout)  # none of them left to arrive in a later run
    _truncate(db)
    _commit_backlog(db, url, rows)
    bound = sql_bound(db, settings.batch_size, rows)
    _truncate(db)
    return {"alone_per_s": alone["per_s"], "alone_stored": alone["stored"],
            "bound_per_s": bound["per_s"], "batch_size": settings.batch_size,
            "lanes": settings.drain_lanes}


def _latency(work: Path, db: str, url: str, consumer: _Consumer, rate: float,
             seconds: float, n: int) -> dict[str, Any]:
    _truncate(db)
    consumer.reset()
    ready, go = work / f"loop-ready-{n}", work / f"loop-go-{n}"
    relay = _script("relay", db, url, str(ready), str(go), "loop", log=work / f"loop-{n}.log")
    try:
        _wait_file(ready, relay)
        go.touch()
        out = work / f"commits-{n}.json"
        producer = _script("producer", db, url, str(rate), str(seconds), str(out),
                           log=work / f"producer-{n}.log")
        producer.wait(timeout=seconds * 4 + 120)
        committed = {int(k): float(v) for k, v in json.loads(out.read_text()).items()}
        kept_up = consumer.wait_for(len(committed), 120)
    finally:
        relay.stop()
    start = min(committed.values()) + 1.0
    lags = sorted((consumer.seen.times[i] - t) * 1000 for i, t in committed.items()
                  if t >= start and i in consumer.seen.times)

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))] if lags else float("nan")

    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": lags[-1] if lags else 0.0,
            "committed_per_s": len(committed) / seconds, "kept_up": kept_up,
            "missing": len(committed) - len(consumer.seen.times)}


def rabbitmq_side(work: Path, rows: int, repeat: int, rate: float, seconds: float,
                  lat_repeat: int, timeout: float, say: Callable[[str], None]
                  ) -> dict[str, Any]:
    """Measure the side; print each run with ``say``; return the runs and their medians."""
    work.mkdir(parents=True, exist_ok=True)
    tp: list[dict[str, Any]] = []
    raw: list[list[dict[str, Any]]] = []
    floors: list[dict[str, Any]] = []
    lat: list[dict[str, Any]] = []
    with _servers(work) as (db, url):
        consumer = _Consumer(url)
        try:
            for n in range(repeat):
                r, trials = _rep(work, db, url, consumer, rows, timeout, n)
                tp.append(r)
                raw.append(trials)
                f = _floor(work, db, url, consumer, rows, timeout, n)
                floors.append(f)
                best = max(trials, key=lambda t: t["per_s"])
                say(f"  throughput rep {n + 1} rabbitmq: {r['per_s']:8,.0f} rows/s (missing "
                    f"{r['missing']}, duplicates {r['duplicates']}); aio-pika alone: "
                    + ", ".join(f"{t['way']} {t['window']} {t['per_s']:,.0f}" for t in trials)
                    + f" msg/s; rabbitmq/best of this rep {r['per_s'] / best['per_s']:.2f}x")
                say(f"  floor rep {n + 1} rabbitmq: the target alone (send_halves of "
                    f"{f['batch_size']}, {f['lanes']} at once, no database) "
                    f"{f['alone_per_s']:,.0f} rows/s; SQL only (claim + mark, batch "
                    f"{f['batch_size']}, no broker) {f['bound_per_s']:,.0f} rows/s")
            for n in range(lat_repeat):
                r = _latency(work, db, url, consumer, rate, seconds, n)
                lat.append(r)
                say(f"  latency rep {n + 1} rabbitmq: p50 {r['p50_ms']:6.1f} ms, p99 "
                    f"{r['p99_ms']:7.1f} ms, max {r['max_ms']:7.1f} ms, committed "
                    f"{r['committed_per_s']:.0f}/s, kept up: {r['kept_up']}, missing "
                    f"{r['missing']}")
        finally:
            consumer.close()
    client = _client_summary(raw) if raw else None
    rows_per_s = median([r["per_s"] for r in tp]) if tp else None
    # each repetition's relay over the same repetition's run of the client's best way
    ratios = [r["per_s"] / c for r, c in zip(tp, client["runs"], strict=True)] if client else []
    summary = {"rows_per_s": rows_per_s,
               "client_per_s": client["per_s"] if client else None,
               "ratio": rows_per_s / client["per_s"] if client and rows_per_s else None,
               "rep_ratios": ratios,
               "alone_per_s": median([f["alone_per_s"] for f in floors]) if floors else None,
               "bound_per_s": median([f["bound_per_s"] for f in floors]) if floors else None,
               "p50_ms": median([r["p50_ms"] for r in lat]) if lat else None,
               "p99_ms": median([r["p99_ms"] for r in lat]) if lat else None,
               "throughput": tp, "client": client, "client_runs": raw, "floor": floors,
               "latency": lat}
    if client and rows_per_s:
        say(f"  rabbitmq target / aio-pika alone: {summary['ratio']:.2f}x (medians of "
            f"{len(tp)}: target {rows_per_s:,.0f} rows/s; the client's best way by median, "
            f"{client['way']} {client['window']} in flight, {client['per_s']:,.0f} msg/s; "
            f"per rep " + ", ".join(f"{x:.2f}" for x in ratios) + ")")
        say(f"  rabbitmq floor (medians): the target alone {summary['alone_per_s']:,.0f} rows/s "
            f"= {summary['alone_per_s'] / client['per_s']:.2f}x the client; SQL only "
            f"{summary['bound_per_s']:,.0f} rows/s = "
            f"{summary['bound_per_s'] / client['per_s']:.2f}x")
    if lat:
        say(f"  rabbitmq commit-to-visible at {rate:.0f} tx/s: p50 {summary['p50_ms']:.1f} ms, "
            f"p99 {summary['p99_ms']:.1f} ms (medians)")
    return summary
