"""bench/relay.py's ``rocketmq`` side: our relay with the RocketMQ 5 target.

The same relay worker as the ``ours`` side (``outbox.celery.run_worker``, same
settings), given ``rocketmq://HOST:PORT``: the official RocketMQ client's
producer sends one call per half and one per end, against broker_lite's gRPC
door in strict proxy mode (``--grpc-proxy-semantics``: RocketMQ's
transaction table, no half de-duplication, topics typed ``TRANSACTION``, as
``mqadmin updateTopic -a +message.type=TRANSACTION`` makes them). It has its
own broker process and its own Celery queue (a second Redis database), so
neither side's worker sees the other's tasks. The consumer is the official
``SimpleConsumer`` (receive, then ``ack``), in threads of this process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["PROXY_FLAGS", "consume_rocketmq", "create_tx_topic", "other_redis_db",
           "ratio_of_pairs"]

#: broker_lite as RocketMQ 5's proxy; async flush, as the native side's broker
PROXY_FLAGS = ("--grpc-proxy-semantics", "--flush", "async", "--log-level", "warning")
#: receiving threads, messages per receive (the proxy's maximum is 32), invisible seconds;
#: each thread acks what it received (``ack_async`` needs an asyncio loop in the thread)
RECEIVERS, BATCH, INVISIBLE = 4, 32, 30


def create_tx_topic(native: str, topic: str) -> None:
    """``topic`` on the proxy-mode broker, typed TRANSACTION (its native admin port)."""
    from broker_lite.client import Admin

    with Admin(native) as admin:
        admin.create_topic(topic, attributes={"message.type": "TRANSACTION"})


def other_redis_db(url: str, db: int = 1) -> str:
    """The same Redis server's database ``db``: the RocketMQ side's Celery queue."""
    base, _, last = url.rstrip("/").rpartition("/")
    return f"{base}/{db}" if last.isdigit() and base.count("/") >= 2 else f"{url.rstrip('/')}/{db}"


async def consume_rocketmq(grpc: str, topic: str, add: Callable[[Sequence[bytes]], None],
                           stop: asyncio.Event, ready: asyncio.Event) -> None:
    """Receive ``topic`` with the official ``SimpleConsumer`` until ``stop``.

    ``add`` (``Seen.add``) runs on the event loop, as the native consumer's
    does, so receipt times are taken in one place for every side.
    """
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    loop = asyncio.get_running_loop()
    consumer = SimpleConsumer(ClientConfiguration(grpc, Credentials(), request_timeout=5),
                              f"{topic}-readers", {topic: FilterExpression()}, await_duration=1)
    await asyncio.to_thread(consumer.startup)
    halt = threading.Event()
    errors: list[str] = []

    def receive() -> None:
        while not halt.is_set():
            try:
                messages = consumer.receive(BATCH, INVISIBLE)
            except Exception as exc:  # a route not there yet under load: ask again
                errors.append(f"{type(exc).__name__}: {exc}")
                halt.wait(0.05)
                continue
            if messages:
                loop.call_soon_threadsafe(add, [m.body for m in messages])
                for message in messages:  # after the receipt is taken: not in the latency
                    try:
                        consumer.ack(message)
                    except Exception as exc:  # seen again after INVISIBLE: a duplicate
                        errors.append(f"ack: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=receive, name=f"rocketmq-receive-{n}", daemon=True)
               for n in range(RECEIVERS)]
    for thread in threads:
        thread.start()
    ready.set()
    try:
        await stop.wait()
    finally:
        halt.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 10)
        await asyncio.to_thread(consumer.shutdown)
    if errors and len(errors) > 100:
        raise RuntimeError(f"{len(errors)} receives failed; last: {errors[-1]}")


def ratio_of_pairs(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], key: str
                   ) -> list[float]:
    """``a[i][key] / b[i][key]`` for each repetition (NaN where ``b`` is 0)."""
    return [x[key] / y[key] if y[key] else float("nan") for x, y in zip(a, b, strict=True)]
