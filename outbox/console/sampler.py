"""The overview's numbers over time, sampled by one thread however many browsers watch.

Every ``sample_seconds`` the sampler reads:

* from the database, :func:`outbox.status.read_status` without the last-hour
  count (its indexed queries), and the rows relayed since the last sample:
  their number (relay throughput) and ``relayed_at - created_at`` (commit to
  visible: the median and the worst). A relay stamps ``relayed_at`` before
  it commits, so that window trails the clock by ``RELAYED_DELAY`` (5 s) and
  every row is counted once. The query scans ``created_at`` from the oldest
  row that was pending around the window's start (capped at an hour), the
  only rows that can have been relayed in it, so it stays small when the
  relay keeps up;
* from the broker, its stats (disk, pending halves) and the topics' max
  offsets (message rates per topic and in all).

Pages and the ``/api/series`` JSON read the kept samples; nothing a browser
does runs a query of its own here. A source that fails leaves its numbers
empty and its error on the page; the next sample tries again.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, select

from broker_lite.errors import BrokerError
from outbox.console.broker_link import BrokerLink
from outbox.console.broker_view import is_internal
from outbox.errors import BrokerUnreachableError
from outbox.models import aware
from outbox.models import transaction_table as t
from outbox.status import OutboxStatus, read_status

__all__ = ["RELAYED_DELAY", "Sample", "Sampler"]

log = logging.getLogger("rocketbox.console")

_MAX_LOOKBACK = timedelta(hours=1)
#: how far the relayed-rows window trails the clock (see :meth:`Sampler._relayed`)
RELAYED_DELAY = timedelta(seconds=5)
_LATENCY_ROWS = 2000


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    backlog: int | None = None
    oldest_pending_age: float | None = None
    parked: int | None = None
    relayed_per_s: float | None = None
    latency_p50: float | None = None
    latency_max: float | None = None
    messages_per_s: float | None = None
    disk_bytes: int | None = None
    pending_halves: int | None = None


@dataclass
class _State:
    status: OutboxStatus | None = None
    topic_offsets: dict[str, int] = field(default_factory=dict)
    topic_rates: dict[str, float] = field(default_factory=dict)
    db_error: str | None = None
    broker_error: str | None = None
    #: when the broker was first seen down in this outage (``None`` while it answers)
    broker_down_since: datetime | None = None
    last_sample_at: datetime | None = None


class Sampler:
    def __init__(self, engine: Engine | None, link: BrokerLink, *, every: float,
                 history: int) -> None:
        self.engine = engine
        self.link = link
        self.every = every
        self.samples: deque[Sample] = deque(maxlen=history)
        self.state = _State()
        self._lock = threading.Lock()
        #: (sample time, oldest pending row's created_at) of recent samples
        self._oldest: deque[tuple[datetime, datetime | None]] = deque(maxlen=history)
        self._window_end: datetime | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="rocketbox-console-sampler",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.sample()
            except Exception:
                log.exception("console sample failed")

    # -- sampling --------------------------------------------------------------------

    def sample(self) -> Sample:
        now = datetime.now(UTC)
        values: dict[str, Any] = {}
        if self.engine is not None:
            self._sample_db(now, values)
        self._sample_broker(now, values)
        sample = Sample(at=now.timestamp(), **values)
        with self._lock:
            self.samples.append(sample)
            self.state.last_sample_at = now
        return sample

    def _sample_db(self, now: datetime, values: dict[str, Any]) -> None:
        assert self.engine is not None
        state = self.state
        try:
            status = read_status(self.engine, parked_limit=0, include_recent=False, now=now)
            with self.engine.connect() as conn:
                oldest = conn.execute(select(func.min(t.c.created_at))
                                      .where(t.c.relayed_at.is_(None), ~t.c.parked)).scalar()
                self._relayed(conn, now, values)
        except Exception as exc:
            state.db_error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            log.warning("console: database sample failed: %s", state.db_error)
            return
        state.db_error = None
        state.status = status
        self._oldest.append((now, aware(oldest) if oldest is not None else None))
        values.update(backlog=status.pending, oldest_pending_age=status.oldest_pending_age,
                      parked=status.parked)

    def _relayed(self, conn: Connection, now: datetime, values: dict[str, Any]) -> None:
        """Rows whose ``relayed_at`` falls in ``[last window end, now - RELAYED_DELAY)``.

        A relay stamps ``relayed_at`` before its transaction commits, so the window
        trails the clock by :data:`RELAYED_DELAY`: by then the rows stamped in it are
        visible, and each is counted once. Only rows written since the oldest row
        that was pending around the window's start can be in it (capped at an hour).
        """
        end = now - RELAYED_DELAY
        start, self._window_end = self._window_end, end
        if start is None or end <= start:
            return
        margin = timedelta(seconds=2 * self.every)
        candidates = [o for at, o in self._oldest if o is not None and at >= start - margin]
        low = max(min([*candidates, start]), now - _MAX_LOOKBACK)
        window = and_(t.c.created_at >= low, t.c.relayed_at >= start, t.c.relayed_at < end)
        relayed = conn.execute(select(func.count()).where(window)).scalar_one()
        recent = conn.execute(select(t.c.created_at, t.c.relayed_at).where(window)
                              .order_by(t.c.created_at.desc()).limit(_LATENCY_ROWS)).all()
        values["relayed_per_s"] = round(int(relayed) / (end - start).total_seconds(), 3)
        latencies = [(aware(r) - aware(c)).total_seconds() for c, r in recent]
        if latencies:
            values["latency_p50"] = round(statistics.median(latencies), 4)
            values["latency_max"] = round(max(latencies), 4)

    def _sample_broker(self, now: datetime, values: dict[str, Any]) -> None:
        state = self.state
        try:
            admin = self.link.admin()
            stats = admin.broker_stats()
            topics = admin.list_topics()
        except (BrokerError, BrokerUnreachableError, OSError) as exc:
            state.broker_error = f"{type(exc).__name__}: {exc}"
            if state.broker_down_since is None:
                state.broker_down_since = now
            log.warning("console: broker sample failed: %s", state.broker_error)
            return
        state.broker_error = None
        state.broker_down_since = None
        offsets = {info.topic: sum(info.max_offsets) for info in topics}
        last = self.samples[-1].at if self.samples else None
        if state.topic_offsets and last is not None:
            seconds = max(now.timestamp() - last, 1e-3)
            state.topic_rates = {
                topic: round(max(0, count - state.topic_offsets.get(topic, 0)) / seconds, 3)
                for topic, count in offsets.items()}
            values["messages_per_s"] = round(sum(
                rate for topic, rate in state.topic_rates.items() if not is_internal(topic)), 3)
        state.topic_offsets = offsets
        values.update(disk_bytes=stats.disk_bytes, pending_halves=stats.pending_transactions)

    # -- reading ---------------------------------------------------------------------

    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def series(self) -> dict[str, list[Any]]:
        """Column-wise samples, as uPlot wants them (``at`` in seconds since the epoch)."""
        with self._lock:
            samples = list(self.samples)
        names = [f for f in Sample.__dataclass_fields__]
        return {name: [getattr(s, name) for s in samples] for name in names}
