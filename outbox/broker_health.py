"""Configuration errors vs outages: the broker probe at start-up, and "unreachable since".

A wrong host name, wrong credentials or an account without permissions are
not outages: retrying never helps, and a relay that printed "ready" and then
retried forever hid them. :func:`probe` asks the outbox's target to connect
once, as the relay and the checker will, and tell them apart
(broker_lite: :func:`outbox.targets.broker_lite_support.probe`; RocketMQ 5:
:func:`outbox.targets.rocketmq.probe`):

- **configuration** (raise :class:`~outbox.errors.ConfigurationError`, one
  line naming the setting; the commands exit 2): the host name does not
  resolve (DNS says it does not exist), the broker refuses the credentials
  (``--access-key``/``--secret-key``), or the account may not act as the
  producer group (``--group``, the ACL);
- **transient** (returned, the caller goes on and retries with backoff): the
  connection is refused, times out, or DNS is temporarily failing.

While the relay cannot reach the broker at all, it records so in the
``rocketbox_broker_state`` table (:func:`note_unreachable`, once per
outage per process), and clears it once a request gets through
(:func:`note_reachable`); ``rocketbox status`` shows "broker ... unreachable
since ...", with the process that reported it (``reported_by``, ``HOST pid N``)
and how old the report is. A database without that table (not migrated to 0003) is left
alone.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, inspect, select, update
from sqlalchemy.exc import SQLAlchemyError

from outbox.config import Outbox
from outbox.models import aware
from outbox.models import broker_state_table as b
from outbox.targets.choose import support_for

__all__ = ["BrokerState", "note_reachable", "note_unreachable", "pass_failed",
           "pass_went_through", "probe", "read_broker_states"]

log = logging.getLogger("rocketbox.relay")


def probe(outbox: Outbox, *, group: str | None = None) -> Exception | None:
    """Connect to the broker once; raise for a configuration error, return a transient one.

    ``group`` is the producer group to connect as, where the broker has one
    (default: the relay's, ``<producer_group>-relay``). Returns None when the
    broker answered. The target does it
    (:meth:`~outbox.targets.choose.TargetSupport.probe`).
    """
    return support_for(outbox).probe(outbox, group=group)


@dataclass(frozen=True, slots=True)
class BrokerState:
    """A broker the relay could not reach: since when, and what it said last."""

    broker: str
    unreachable_since: datetime
    last_error: str | None
    updated_at: datetime
    #: the relay process that last reported it (``HOST pid N``); None before revision 0005
    reported_by: str | None = None


#: this process's view, so a relay writes the table when the state changes, not per pass:
#: broker -> when this process last wrote "unreachable" (monotonic seconds)
_noted: dict[str, float] = {}
_cleared: set[str] = set()
_state_lock = threading.Lock()
#: while the outage lasts, refresh last_error and updated_at this often
_REFRESH = 30.0


def pass_failed(outbox: Outbox, error: BaseException) -> None:
    """A relay pass could not reach the broker at all: record it (at most every 30 s)."""
    now = time.monotonic()
    with _state_lock:
        last = _noted.get(outbox.broker_display)
        if last is not None and now - last < _REFRESH:
            return
        _noted[outbox.broker_display] = now
        _cleared.discard(outbox.broker_display)
    note_unreachable(outbox.engine, outbox.broker_display, error)


def pass_went_through(outbox: Outbox) -> None:
    """A relay pass reached the broker: clear the mark (once per outage per process)."""
    with _state_lock:
        if outbox.broker_display in _cleared:
            return
        _cleared.add(outbox.broker_display)
        _noted.pop(outbox.broker_display, None)
    note_reachable(outbox.engine, outbox.broker_display)


def reporter() -> str:
    """This process, as a broker mark names its reporter: ``HOST pid N``."""
    return f"{socket.gethostname()} pid {os.getpid()}"[:255]


def note_unreachable(engine: Engine, broker: str, error: BaseException) -> bool:
    """Record that ``broker`` cannot be reached (keeps the first ``since``); True if done."""
    now = datetime.now(UTC)
    text = str(error)[:2000]
    try:
        with engine.begin() as conn:
            if not _has_table(conn):
                return False
            by = {"reported_by": reporter()} if _has_reporter(conn) else {}
            changed = conn.execute(update(b).where(b.c.broker == broker).values(
                last_error=text, updated_at=now, **by)).rowcount
            conn.execute(update(b).where(b.c.broker == broker,
                                         b.c.unreachable_since.is_(None))
                         .values(unreachable_since=now))
            if not changed:
                conn.execute(b.insert().values(broker=broker, unreachable_since=now,
                                               last_error=text, updated_at=now, **by))
    except SQLAlchemyError:  # two relays inserting at once, or the database is away
        log.debug("could not record the broker as unreachable", exc_info=True)
        return False
    return True


def note_reachable(engine: Engine, broker: str) -> None:
    """Clear ``broker``'s unreachable mark, if it has one."""
    try:
        with engine.begin() as conn:
            if _has_table(conn):
                conn.execute(update(b).where(b.c.broker == broker,
                                             b.c.unreachable_since.is_not(None))
                             .values(unreachable_since=None, last_error=None,
                                     updated_at=datetime.now(UTC)))
    except SQLAlchemyError:
        log.debug("could not clear the broker's unreachable mark", exc_info=True)


def read_broker_states(conn: Connection) -> list[BrokerState]:
    """The brokers the relay currently cannot reach (empty without the table)."""
    if not _has_table(conn):
        return []
    with_reporter = _has_reporter(conn)
    columns = [c for c in b.c if with_reporter or c.name != "reported_by"]
    return [BrokerState(r.broker, aware(r.unreachable_since), r.last_error, aware(r.updated_at),
                        r.reported_by if with_reporter else None)
            for r in conn.execute(select(*columns).where(b.c.unreachable_since.is_not(None))
                                  .order_by(b.c.broker))]


def _has_table(conn: Connection) -> bool:
    return inspect(conn).has_table(b.name)


def _has_reporter(conn: Connection) -> bool:
    """Whether the table has ``reported_by`` (revision 0005); ``status`` also reads older
    databases."""
    return any(c["name"] == "reported_by" for c in inspect(conn).get_columns(b.name))
