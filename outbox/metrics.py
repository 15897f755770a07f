"""Prometheus metrics for the outbox.

Series (all in rocketbox's own registry, :func:`registry`):

=============================================  =========  =======================================
``rocketbox_outbox_backlog{topic}``            gauge      unrelayed, unparked rows (from the DB)
``rocketbox_outbox_in_flight{topic}``          gauge      of those, claimed by a relay right now
``rocketbox_outbox_oldest_pending_age_seconds``  gauge    age of the oldest pending row, per topic
``rocketbox_outbox_parked{topic}``             gauge      parked rows waiting for a replay
``rocketbox_outbox_up``                        gauge      1 if the last DB read worked, else 0
``rocketbox_relay_latency_seconds``            histogram  commit (``created_at``) to relayed
``rocketbox_checkback_total{state}``           counter    check-back answers by state
``rocketbox_inbox_duplicates_total{group}``    counter    redeliveries the inbox skipped
=============================================  =========  =======================================

The ``rocketbox_outbox_*`` gauges come from :class:`OutboxCollector`, which
reads the status table when Prometheus scrapes, at most once per
``cache_seconds``. A topic once seen keeps reporting (0 when drained), so
dashboards do not lose the series. The relay, the check-back responder and the
inbox call :func:`observe_relayed`, :func:`observe_checkback` and
:func:`observe_inbox_duplicate`; these never raise.

Metrics are per process: run the Celery relay with a solo or threads pool to
export its latency histogram, or give each process its own port. To serve
rocketbox's series from an application's existing ``/metrics``, register the
whole registry there: ``prometheus_client.REGISTRY.register(registry())``.

prometheus_client is loaded by the first metric recorded or served, not by
``import outbox``: a process that never relays, checks back or scrapes never
imports it.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from outbox.models import aware
from outbox.status import OutboxStatus, read_status

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

__all__ = [
    "RELAY_LATENCY_BUCKETS",
    "OutboxCollector",
    "observe_checkback",
    "observe_inbox_duplicate",
    "observe_relayed",
    "observe_relayed_many",
    "registry",
    "start_metrics_server",
    "unwatch_outbox",
    "watch_outbox",
]

log = logging.getLogger("rocketbox.metrics")

#: seconds; the relay normally takes milliseconds, a broker outage takes minutes
RELAY_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                         60.0, 300.0, 900.0, 3600.0)


class _Metrics:
    """The process's metric objects, made once (see :func:`_metrics`)."""

    def __init__(self) -> None:
        # loaded here, on the first metric recorded or served (module docstring)
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.relay_latency = Histogram(
            "rocketbox_relay_latency_seconds",
            "Seconds from a status row's commit (created_at) to its relay (relayed_at).",
            buckets=RELAY_LATENCY_BUCKETS, registry=self.registry)
        self.checkback = Counter(
            "rocketbox_checkback", "Check-back answers given, by state.", ["state"],
            registry=self.registry)
        self.inbox_duplicates = Counter(
            "rocketbox_inbox_duplicates", "Redelivered messages the inbox skipped, by group.",
            ["group"], registry=self.registry)
        self.outbox: OutboxCollector | None = None


_lock = threading.Lock()
_instance: _Metrics | None = None


def _metrics() -> _Metrics:
    global _instance
    with _lock:
        if _instance is None:
            _instance = _Metrics()
        return _instance


def registry() -> CollectorRegistry:
    """rocketbox's registry (one per process; the default registry is left alone)."""
    return _metrics().registry


def observe_relayed(created_at: datetime, relayed_at: datetime | None = None) -> None:
    """Record one relayed row's commit-to-relayed latency (``relayed_at`` defaults to now)."""
    try:
        end = aware(relayed_at) if relayed_at is not None else datetime.now(UTC)
        seconds = (end - aware(created_at)).total_seconds()
        _metrics().relay_latency.observe(max(0.0, seconds))
    except Exception:  # metrics must never break the relay
        log.debug("could not record relay latency", exc_info=True)


def observe_relayed_many(created: Iterable[datetime], relayed_at: datetime | None = None
                         ) -> None:
    """Record the commit-to-relayed latency of rows relayed together (a relay pass's).

    The same series as one :func:`observe_relayed` per row, at a fraction of the
    cost: the rows are counted into the buckets first, then each bucket and the
    sum are added once (a pass of 200 rows took 200 locked updates of the sum and
    200 of a bucket).
    """
    try:
        end = aware(relayed_at) if relayed_at is not None else datetime.now(UTC)
        seconds = [max(0.0, (end - (c if c.tzinfo is not None else c.replace(tzinfo=UTC))
                             ).total_seconds()) for c in created]
        if seconds:
            _observe_all(_metrics().relay_latency, seconds)
    except Exception:  # metrics must never break the relay
        log.debug("could not record relay latency", exc_info=True)


def _observe_all(histogram: Any, values: list[float]) -> None:
    """``histogram.observe(v)`` for each of ``values``, one update per bucket touched.

    Goes through the histogram's own bucket and sum values (prometheus_client's
    ``Histogram`` keeps them as ``_upper_bounds``, ``_buckets`` and ``_sum``);
    a histogram without them gets one ``observe`` per value.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not bounds or buckets is None or total is None or len(buckets) != len(bounds) \
            or bounds[-1] != float("inf"):
        for value in values:
            histogram.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        counts[bisect_left(bounds, value)] += 1  # the first bucket with value <= its bound
    total.inc(sum(values))
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)


def observe_checkback(state: str) -> None:
    """Count one check-back answer: ``COMMIT``, ``ROLLBACK`` or ``UNKNOWN``."""
    try:
        _metrics().checkback.labels(state=str(state).upper()).inc()
    except Exception:
        log.debug("could not count a check-back", exc_info=True)


def observe_inbox_duplicate(group: str) -> None:
    """Count one redelivery the inbox recognised and skipped for consumer ``group``."""
    try:
        _metrics().inbox_duplicates.labels(group=group).inc()
    except Exception:
        log.debug("could not count an inbox duplicate", exc_info=True)


class OutboxCollector:
    """Reads the status table on scrape (cached) and reports the ``rocketbox_outbox_*`` gauges."""

    def __init__(self, engine: Engine, *, cache_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, OutboxStatus | None] | None = None
        self._seen: set[str] = set()

    def retarget(self, engine: Engine, *, cache_seconds: float | None = None) -> None:
        """Read another database from now on (topics seen so far are forgotten)."""
        with self._lock:
            self.engine = engine
            if cache_seconds is not None:
                self.cache_seconds = cache_seconds
            self._cached = None
            self._seen = set()

    def read(self) -> OutboxStatus | None:
        """The status, at most ``cache_seconds`` old; ``None`` if the database failed."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self.cache_seconds:
                return self._cached[1]
            status: OutboxStatus | None
            try:
                status = read_status(self.engine, parked_limit=0, include_recent=False)
            except SQLAlchemyError as exc:
                log.warning("metrics: cannot read the outbox status: %s", exc)
                status = None
            self._cached = (now, status)
            if status is not None:
                self._seen.update(s.topic for s in status.topics)
            return status

    def describe(self) -> Iterable[Any]:
        """Names only: registering the collector must not query the database."""
        yield from self._families()

    def collect(self) -> Iterable[Any]:
        status = self.read()
        yield from self._families(status, up=status is not None)

    def _families(self, status: OutboxStatus | None = None, *, up: bool = True
                  ) -> Iterator[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        backlog = GaugeMetricFamily("rocketbox_outbox_backlog",
                                    "Unrelayed, unparked status rows.", labels=["topic"])
        in_flight = GaugeMetricFamily("rocketbox_outbox_in_flight",
                                      "Pending rows claimed by a relay worker now.",
                                      labels=["topic"])
        oldest = GaugeMetricFamily("rocketbox_outbox_oldest_pending_age_seconds",
                                   "Age of the oldest pending status row.", labels=["topic"])
        parked = GaugeMetricFamily("rocketbox_outbox_parked",
                                   "Parked rows waiting for `rocketbox replay`.",
                                   labels=["topic"])
        if status is not None:
            by_topic = {s.topic: s for s in status.topics}
            for topic in sorted(self._seen):
                s = by_topic.get(topic)
                backlog.add_metric([topic], s.pending if s else 0)
                in_flight.add_metric([topic], s.in_flight if s else 0)
                oldest.add_metric([topic], (s.oldest_pending_age or 0.0) if s else 0.0)
                parked.add_metric([topic], s.parked if s else 0)
        yield from (backlog, in_flight, oldest, parked)
        yield GaugeMetricFamily("rocketbox_outbox_up",
                                "1 if the last read of the status table worked.",
                                value=1 if up else 0)


def watch_outbox(engine: Engine, *, cache_seconds: float = 5.0) -> OutboxCollector:
    """Report the ``rocketbox_outbox_*`` gauges for ``engine``'s database.

    A process reports one outbox: a second call points the collector at the
    new engine (the series names cannot be registered twice).
    """
    metrics = _metrics()
    with _lock:
        collector = metrics.outbox
        if collector is None:
            collector = OutboxCollector(engine, cache_seconds=cache_seconds)
            metrics.registry.register(collector)
            metrics.outbox = collector
        else:
            collector.retarget(engine, cache_seconds=cache_seconds)
    return collector


def unwatch_outbox() -> None:
    """Stop reporting the ``rocketbox_outbox_*`` gauges (the counters stay)."""
    metrics = _metrics()
    with _lock:
        if metrics.outbox is not None:
            metrics.registry.unregister(metrics.outbox)
            metrics.outbox = None


def start_metrics_server(port: int, addr: str = "127.0.0.1", *,
                         engine: Engine | None = None) -> WSGIServer:
    """Serve :func:`registry` on ``http://addr:port/metrics`` from a daemon thread.

    With ``engine``, the outbox gauges for that database are served too.
    Port 0 picks a free port; the returned server's ``server_port`` says which.
    """
    from prometheus_client import start_http_server

    if engine is not None:
        watch_outbox(engine)
    server, _thread = start_http_server(port, addr, registry=registry())
    server_port: int = server.server_port
    log.info("serving metrics on http://%s:%d/metrics", addr, server_port)
    return server
