"""The check-back responder for RocketMQ 5: official Producers answering from the status table.

A RocketMQ 5 proxy sends a ``RecoverOrphanedTransactionCommand`` for an
orphaned half on the Telemetry stream of a producer that announced the
half's topic in its settings (the producer group of a half is its topic).
So the responder runs one official ``Producer`` per proxy endpoint (a
proxy's transaction table is its own), each announcing every topic the
outbox has published to, read from the status table and read again every
``refresh`` seconds (a new topic gets a new producer on each endpoint).
Their :class:`~outbox.targets.rocketmq_checkback.StatusTableChecker`
answers each half by the per-half rules.

The client re-opens a lost Telemetry stream by itself (its settings sync
runs every few seconds); a producer whose start failed (the proxy was down)
is started again at the next refresh.
"""

from __future__ import annotations

import logging
import threading

from rocketmq import Producer
from sqlalchemy import Engine, select

from outbox.config import Outbox
from outbox.models import transaction_table as t
from outbox.targets.rocketmq import client_configuration
from outbox.targets.rocketmq_checkback import StatusTableChecker

__all__ = ["RocketMQResponder", "outbox_topics"]

log = logging.getLogger("rocketbox.checker")


def outbox_topics(engine: Engine) -> set[str]:
    """Every topic the outbox has a row for."""
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.topic).distinct()).scalars())


class RocketMQResponder:
    """Answers RocketMQ's check-backs for ``outbox``, one producer set per proxy endpoint.

    ``extra_topics`` are announced even before the outbox has a row for them.
    """

    def __init__(self, outbox: Outbox, *, extra_topics: tuple[str, ...] = ()) -> None:
        self.outbox = outbox
        self.checker = StatusTableChecker(outbox)
        self._extra = set(extra_topics)
        self._announced: set[str] = set()
        self._producers: list[Producer] = []
        self._lock = threading.Lock()

    @property
    def checks_answered(self) -> dict[str, int]:
        return dict(self.checker.answered)

    def refresh(self) -> int:
        """Announce topics not announced yet (one producer per endpoint); returns how many.

        A proxy that cannot be reached leaves its topics unannounced, to be
        tried again at the next refresh.
        """
        with self._lock:
            topics = sorted((outbox_topics(self.outbox.engine) | self._extra) - self._announced)
            if not topics:
                return 0
            started: list[Producer] = []
            for endpoint in self.outbox.target_address.endpoint_strings():
                producer = Producer(client_configuration(self.outbox, endpoint), topics,
                                    checker=self.checker, tls_enable=self.outbox.target_address.tls)
                try:
                    producer.startup()
                except Exception as exc:
                    log.warning("RocketMQ proxy %s: the check-back producer did not start "
                                "(%s); trying again at the next refresh", endpoint, exc)
                    for done in started:
                        done.shutdown()
                    return 0
                started.append(producer)
            self._producers.extend(started)
            self._announced.update(topics)
            log.info("check-back responder announces %s on %s", ", ".join(topics),
                     self.outbox.broker_display)
            return len(topics)

    def shutdown(self) -> None:
        with self._lock:
            producers, self._producers = self._producers, []
            self._announced.clear()
        for producer in producers:
            try:
                producer.shutdown()
            except Exception:
                log.warning("shutting a check-back producer down failed", exc_info=True)

    def serve(self, stop: threading.Event, *, refresh: float = 10.0) -> None:
        """Refresh every ``refresh`` seconds until ``stop`` is set, then shut down."""
        try:
            while True:
                self.refresh()
                if stop.wait(refresh):
                    return
        finally:
            self.shutdown()
