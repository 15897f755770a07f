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

__all__ = ["NATS_REDIS_DB", "WINDOWS", "ceiling", "ceiling_line", "consume_nats", "floor_line",
           "raw_rate", "sql_bound_cpu", "target_rate"]

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


async def _raw_once(url: str, rows: int, window: int) -> tuple[float, dict[str, float]]:
    """nats-py publishing ``rows`` messages with ``window`` in flight: (msg/s, CPU seconds of
    nats-server and of this process while it ran)."""
    import nats
    from _relay_common import body
    from _relay_floors import SERVER_PIDS, cpu_split

    client = await nats.connect(url)
    try:
        js = client.jetstream(timeout=10)
        topic = f"RelayRaw{uuid.uuid4().hex[:10]}"
        await _stream(js, topic)
        payloads = [json.dumps(body(i), separators=(",", ":")).encode() for i in range(rows)]
        # made before the clock starts, as the relay's rows come with their tx_ids
        ids = [uuid.uuid4().hex for _ in range(rows)]
        watch = cpu_split({"nats": SERVER_PIDS["nats"]} if "nats" in SERVER_PIDS else {})
        t0 = time.monotonic()
        for start in range(0, rows, abs(window)):
            chunk = range(start, min(rows, start + abs(window)))
            if window > 0:  # js.publish: one request each, awaited together
                await asyncio.gather(*(
                    js.publish(topic, payloads[i], headers={"Nats-Msg-Id": ids[i]},
                               stream=topic) for i in chunk))
            else:  # js.publish_async: all sent, then their acks awaited
                await asyncio.gather(*[
                    await js.publish_async(topic, payloads[i], stream=topic,
                                           headers={"Nats-Msg-Id": ids[i]})
                    for i in chunk])
        seconds = time.monotonic() - t0
        cpu = watch()
        await js.delete_stream(topic)
        return rows / seconds, cpu
    finally:
        await client.close()


def target_rate(url: str, rows: int, batch: int = 200,
                lanes: int = 1) -> tuple[float, dict[str, float]]:
    """The NATS target alone (no database, no Celery): ``send_halves`` of ``batch`` rows at a
    time through its sync publisher, as the relay calls it, ``lanes`` callers at once;
    (rows/s, CPU seconds of nats-server and of this process while it ran)."""
    from concurrent.futures import ThreadPoolExecutor

    import nats
    from _relay_common import body
    from _relay_floors import SERVER_PIDS, cpu_split
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
        with ThreadPoolExecutor(lanes) as pool:
            watch = cpu_split({"nats": SERVER_PIDS["nats"]} if "nats" in SERVER_PIDS else {})
            t0 = time.monotonic()
            list(pool.map(publisher.send_halves, batches))
            seconds = time.monotonic() - t0
            cpu = watch()
    finally:
        publisher.close()
    asyncio.run(setup(delete=True))
    return (rows - 1) / seconds, cpu


def raw_rate(url: str, rows: int, batch: int = 200, lanes: int = 1) -> dict[str, Any]:
    """nats-py alone: its best confirmed-publish rate over :data:`WINDOWS`; and the target
    alone (:func:`target_rate`, ``batch`` rows a call, ``lanes`` at once) right after it.
    Each with the CPU seconds nats-server and this process used while it ran."""
    trials: list[dict[str, Any]] = []
    for window in WINDOWS:
        per_s, cpu = asyncio.run(_raw_once(url, rows, window))
        trials.append({"window": window, "per_s": per_s, "cpu_s": cpu})
    best = max(trials, key=lambda t: float(t["per_s"]))
    alone, alone_cpu = target_rate(url, rows, batch, lanes)
    return {"per_s": best["per_s"], "window": best["window"], "cpu_s": best["cpu_s"],
            "rows": rows, "trials": trials, "target_alone_per_s": alone,
            "target_alone_cpu_s": alone_cpu, "batch_size": batch, "lanes": lanes}


async def sql_bound_cpu(env: Any, rows: int, batch_size: int) -> dict[str, Any]:
    """The SQL-only bound (``bound_once``: claim + mark, no broker) with the CPU of every
    PostgreSQL process: the bound's own backend (read inside, it exits with its
    connection) plus the rest of the server (WAL writer, checkpointer, other backends)
    meanwhile, by process in ``postgres_rest_by_process``."""
    from _common import settle
    from _relay_floors import SERVER_PIDS, cpu_by_process
    from _relay_legs import sql_bound
    from _relay_runs import reset_tables, run_producer

    reset_tables(env)
    await run_producer(env, "ours", "backlog", rows, topic="RelayBound")
    settle()
    server = SERVER_PIDS.get("postgres")
    before = cpu_by_process(server) if server else {}
    bound = await asyncio.to_thread(sql_bound, env.db, batch_size, rows)
    after = cpu_by_process(server) if server else {}
    # a process absent before is the bound's own backend (counted inside; it may still
    # be exiting): left out, so that an autovacuum worker started meanwhile is too
    rest = {name: after[name] - before[name] for name in after if name in before}
    bound["postgres_rest_by_process"] = {k: v for k, v in rest.items() if v > 0}
    bound["cpu_s"]["postgres_rest"] = sum(rest.values())
    return bound


def ceiling(base: dict[str, Any], bound: dict[str, Any], cores: int) -> dict[str, Any]:
    """The physical ceiling of any relay on ``cores`` cores: each row costs at least the CPU
    of claiming and marking it (the SQL-only bound: PostgreSQL's processes and the Python
    that drives them) plus the CPU of publishing it (nats-py's best raw rate: nats-server
    and nats-py), so no relay exceeds ``cores / (sql + publish)`` rows/s, whatever it
    overlaps. Also the same with our target's publish in place of nats-py's."""
    sql = sum(bound["cpu_s"].values()) / bound["rows"]
    publish = sum(base["cpu_s"].values()) / base["rows"]
    ours = sum(base["target_alone_cpu_s"].values()) / max(1, base["rows"] - 1)
    per_s = cores / (sql + publish)
    raw = float(base["per_s"])
    # nats-py alone runs on one thread (and nats-server on another core): its rate on an
    # idle machine is about one row per the busier one's CPU per row. The ceiling over that
    # is the same bar measured in CPU, which other work on the machine changes less
    busiest = max(base["cpu_s"].values()) / base["rows"]
    return {"cores": cores, "sql_cpu_us_per_row": sql * 1e6,
            "raw_cpu_bound_per_s": 1.0 / busiest,
            "of_raw_cpu_bound": per_s * busiest,
            "publish_cpu_us_per_row": publish * 1e6, "target_cpu_us_per_row": ours * 1e6,
            "per_s": per_s, "of_raw": per_s / raw,
            "with_target_per_s": cores / (sql + ours),
            "with_target_of_raw": cores / (sql + ours) / raw}


def ceiling_line(rep: int, top: dict[str, Any]) -> str:
    """The ceiling as one printed line (:func:`ceiling`)."""
    return (f"  ceiling rep {rep} nats  : CPU per row: SQL (claim + mark) "
            f"{top['sql_cpu_us_per_row']:.1f} us + publish (nats-py + nats-server) "
            f"{top['publish_cpu_us_per_row']:.1f} us (our target's "
            f"{top['target_cpu_us_per_row']:.1f} us); on {top['cores']} cores no relay can "
            f"exceed {top['per_s']:,.0f} rows/s = {top['of_raw']:.2f}x raw "
            f"({top['with_target_of_raw']:.2f}x with our target's publish; "
            f"{top['of_raw_cpu_bound']:.2f}x of raw's own CPU bound "
            f"{top['raw_cpu_bound_per_s']:,.0f} msg/s)"
            + (f"; the relay worker's own Python {top['relay_worker_cpu_us_per_row']:.1f} us "
               f"a row" if "relay_worker_cpu_us_per_row" in top else ""))


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


def nats_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The nats side's repetitions (each :func:`raw_rate` with its ``sql_bound``,
    ``ceiling`` and ``relay_per_s``) and their medians, as saved in the results JSON."""
    from statistics import median

    def of_raw(key: str) -> list[float]:
        return [float(r[key]) / float(r["per_s"]) for r in runs]

    return {"meaning": "per repetition: the relay's rows/s, nats-py's best confirmed-publish "
                       "rate (raw), the target alone, the SQL-only bound and the physical "
                       "ceiling (cores / CPU per row of SQL + raw publish), each also as a "
                       "multiple of raw (bench/_relay_nats.py)",
            "relay_of_raw": of_raw("relay_per_s"),
            "target_alone_of_raw": of_raw("target_alone_per_s"),
            "sql_of_raw": [float(r["sql_bound"]["per_s"]) / float(r["per_s"]) for r in runs],
            "ceiling_of_raw": [float(r["ceiling"]["of_raw"]) for r in runs],
            "ceiling_of_raw_median": median(float(r["ceiling"]["of_raw"]) for r in runs),
            "relay_of_raw_median": median(of_raw("relay_per_s")),
            "runs": runs}
