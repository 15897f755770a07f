"""The wake-up lane: PostgreSQL ``LISTEN/NOTIFY`` next to the relay tasks.

A ``rocketbox.relay`` task reaches a worker through the Celery broker: the
on_commit hook waits for its ``enqueue_window``, pushes the task to Redis,
the worker pops it and hands it to a pool thread. That is most of a row's
commit-to-visible time at a steady load, and none of it is the relay's work.

So with ``CelerySettings.listen`` (the default on PostgreSQL) no task is
sent: the relays are woken through ``NOTIFY rocketbox_relay``.
:func:`outbox.publish.publish` puts ``pg_notify`` in the row's own
``INSERT``, which PostgreSQL delivers with the commit
(:class:`~outbox.celery.hooks.WakeHook`; a row sent with the ``COMMIT``
gets :func:`notify` after it, one autocommit statement on a pooled
connection). A first version sent a task too, and the tasks' empty claims
and Celery's per-task work cost the listener more than they saved
(bench/README.md). Every worker runs a
:class:`Listener` on threads of its main process: one connection of its own
that ``LISTEN`` s on the channel, and ``CelerySettings.listen_lanes`` relay
threads. A wake-up goes to an idle lane, which relays every due row right
away (passes until a claim comes back short), so a row committed while
another lane's pass is in flight does not wait for that pass to end. With
every lane busy, the wake-ups that arrive are taken together by the next
pass: the batch grows with the load instead of waiting for a window. With
one lane (the default) the listening thread is the lane: it relays on the
thread that read the notification, with no hand-off to another thread (a
thread woken through a condition also waits for the GIL); the
notifications that arrive during a pass are read after it, all at once, and
taken by one more pass.

Each notification names its rows (:mod:`outbox.notified`). On a target that
keeps one half and one commit per ``tx_id`` (broker_lite), the one listener
per database that holds the leader lock relays the named rows that are due
without claiming them (:class:`NamedRows`); the others claim only what it
left. This changes no guarantee. The status table stays the truth: the
listener relays nothing the status table does not say is due (a name is
only a hint), a row two relays send at once is one message, and the other
relays (tasks, sweeper, followers) are kept apart by the same claims
(``SKIP LOCKED`` and the lease). PostgreSQL delivers a notification only after its
transaction commits, to sessions listening then; one that is lost (the
listener reconnecting, the notifying statement failing, a worker restarted)
only leaves its rows to the next sweep (the sweeper lane, as for a task lost
with Redis: within about ``sweep_interval + sweep_min_age``). The tasks stay
registered (``rocketbox.sweep``, a hook made with ``listen`` off). On SQLite
(no NOTIFY), or without psycopg 3 installed, the setting is ignored: the hook
enqueues tasks and no listener starts.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery import bootsteps
from sqlalchemy import Engine, func, select

from outbox.celery.state import RocketboxState, rocketbox_state
from outbox.celery.tasks import TRANSIENT_ERRORS
from outbox.errors import ConfigurationError
from outbox.notified import parse_wake, read_due, wake_payloads
from outbox.relay import Relay

__all__ = ["APPLICATION_NAME", "CHANNEL", "FOLLOWER_GRACE", "LEADER_LOCK", "ListenStep",
           "Listener", "NamedRows", "can_listen", "notify"]

log = logging.getLogger("rocketbox.celery")

#: the channel the on_commit hook notifies and the workers listen on
CHANNEL = "rocketbox_relay"
#: the claim names of a worker's listener lanes (``host:pid:listener-1``, ...)
LISTENER_RUN_ID = "listener"
#: the listening connection's ``application_name`` (``pg_stat_activity`` shows it)
APPLICATION_NAME = "rocketbox-listener"
#: the advisory lock (per database) whose holder leads: it relays named rows unclaimed
LEADER_LOCK = 0x726F636B6574626F  # "rocketbo"
#: a listener that does not lead claims, this long after a wake-up named rows, the rows
#: committed this long ago (seconds): those the leader has not reached (under a burst
#: every worker helps), or every one when no listener leads
FOLLOWER_GRACE = 0.2
_NOTIFY = f"NOTIFY {CHANNEL}"


def can_listen(engine: Engine) -> bool:
    """Whether the wake-up can run for ``engine``: PostgreSQL (``LISTEN/NOTIFY``) with
    psycopg 3 installed (the listener's own connection uses it, whatever the engine's
    driver). Otherwise the hook enqueues tasks and no listener starts."""
    return engine.dialect.name == "postgresql" and importlib.util.find_spec("psycopg") is not None


def notify(engine: Engine, tx_ids: Sequence[str] = ()) -> None:
    """Wake the listening relays for ``tx_ids`` (after a commit; never raises: a lost
    wake-up only waits). No ids: a wake-up that names none (a claiming pass)."""
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            if not tx_ids:
                conn.exec_driver_sql(_NOTIFY)
            for payload in wake_payloads(tx_ids):
                conn.execute(select(func.pg_notify(CHANNEL, payload)))
    except Exception as exc:  # never into the commit: the task or the sweeper relays the rows
        log.warning("could not notify %s, the relay task or the sweeper relays the rows: %s",
                    CHANNEL, exc)


def _conninfo(engine: Engine) -> str:
    """libpq's connection string for ``engine``'s database (whatever its driver)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """Relays due rows whenever the channel is notified (see the module doc).

    One thread holds the ``LISTEN`` ing connection; ``lanes`` threads relay
    (one lane: the listening thread itself, no hand-off). A wake-up goes to
    an idle lane at once, so rows committed while a pass is in flight start
    their own pass instead of waiting for it to end (the
    lanes race as every relay does, kept apart by the claims). With every
    lane busy the wake-up is remembered, and the first lane to finish makes
    one more pass over whatever is due then: under load the passes grow,
    idle they start at once.
    """

    def __init__(self, state: RocketboxState, *, on_fatal: Callable[[str], None],
                 retry_seconds: float = 1.0, wait_seconds: float = 0.5,
                 lanes: int | None = None, catch_up_seconds: float | None = None,
                 follower_grace: float = FOLLOWER_GRACE) -> None:
        self.state = state
        self._on_fatal = on_fatal
        self._retry = retry_seconds
        self._wait = wait_seconds  # how often the threads look at their stop flag
        #: the leader's catch-up claim after a named pass: at most this often (seconds)
        self._catch_up = wait_seconds if catch_up_seconds is None else catch_up_seconds
        self._grace = follower_grace
        self._lanes = state.settings.listen_lanes if lanes is None else lanes
        if self._lanes < 1:
            raise ConfigurationError(f"listen_lanes must be >= 1, got {self._lanes}",
                                     setting="listen_lanes")
        self._stop = threading.Event()
        #: set while the listener holds a ``LISTEN`` ing connection
        self.listening = threading.Event()
        self._due = threading.Condition()
        self._woken = False  # a wake-up no lane has taken yet
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run, name="rocketbox-listener",
                                          daemon=True)]
        if self._lanes > 1:  # else the listening thread relays itself (_listen)
            self._threads += [threading.Thread(target=self._lane, args=(n,), daemon=True,
                                               name=f"rocketbox-listener-{n}")
                              for n in range(1, self._lanes + 1)]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        with self._due:
            self._due.notify_all()
        threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout)

    def wake(self) -> None:
        """Rows may be due: an idle lane relays them now, else the next lane to finish."""
        with self._due:
            self._woken = True
            self._due.notify()

    def relay_due(self, lane: int = 1, *, older_than: float | None = None) -> int:
        """Passes over due rows (committed ``older_than`` seconds ago, if given) until a
        claim comes back short; the rows relayed."""
        relay = self.state.relay(f"{LISTENER_RUN_ID}-{lane}")
        limit = relay.settings.batch_size  # the target's own where the user set none
        relayed = 0
        while not self._stop.is_set():
            report = relay.run_once(older_than=older_than)
            relayed += report.relayed
            if report.claimed < limit or report.relayed == 0:
                return relayed
        return relayed

    def _lane(self, lane: int) -> None:
        try:
            while not self._stop.is_set():
                with self._due:
                    while not self._woken and not self._stop.is_set():
                        self._due.wait(self._wait)
                    if self._stop.is_set():
                        return
                    self._woken = False
                try:
                    self.relay_due(lane)
                except TRANSIENT_ERRORS as exc:  # the broker is away: the sweeper retries
                    log.warning("relay after a wake-up failed: %s", exc)
        except Exception as exc:
            log.exception("a wake-up lane failed")
            self._on_fatal(f"the wake-up listener died: {exc!r}")

    def _run(self) -> None:
        import psycopg

        try:
            while not self._stop.is_set():
                try:
                    self._listen(psycopg)
                except (psycopg.OperationalError, *TRANSIENT_ERRORS) as exc:
                    self.listening.clear()
                    log.warning("the wake-up listener lost %s (%s); listening again in "
                                "%.1fs (the sweeper covers the gap)", CHANNEL, exc, self._retry)
                    self._stop.wait(self._retry)
        except Exception as exc:
            log.exception("the wake-up listener failed")
            self._on_fatal(f"the wake-up listener died: {exc!r}")
        finally:
            self.listening.clear()

    def _listen(self, psycopg: Any) -> None:
        with psycopg.connect(_conninfo(self.state.outbox.engine), autocommit=True,
                             application_name=APPLICATION_NAME) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            self.wake()  # rows committed while nobody listened: relay them now
            if self._lanes == 1:
                self._listen_and_relay(conn)
                return
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=self._wait):  # each one as it arrives
                    self.wake()

    def _listen_and_relay(self, conn: Any) -> None:
        """One lane: relay on this thread whenever woken (notified, or :meth:`wake`).

        Where the target allows it (:meth:`~outbox.relay.Relay.can_relay_read`),
        the listener holding the leader lock relays the rows a wake-up names
        without claiming them (:class:`NamedRows`); the others claim only rows
        the leader has left for :data:`FOLLOWER_GRACE` seconds.
        """
        relay = self.state.relay(f"{LISTENER_RUN_ID}-1")
        named_rows = NamedRows(relay, conn, try_seconds=self._wait,
                               catch_up_seconds=self._catch_up,
                               follower_grace=self._grace) if relay.can_relay_read() else None
        while not self._stop.is_set():
            with self._due:
                woken, self._woken = self._woken, False
            named: list[str] = []
            if not woken and named_rows is not None and named_rows.held:
                # what has come already rides with the last pass's record; else it goes now
                for note in conn.notifies(timeout=0.0):
                    woken |= _take(note.payload, named)
                if not (woken or named):
                    named_rows.write_record()
            if not (woken or named):
                # the first notification ends the wait; those already come (all that
                # came during the last pass) are taken by the same pass
                wait = self._wait if named_rows is None else named_rows.wait(self._wait)
                for note in conn.notifies(timeout=wait, stop_after=1):
                    woken |= _take(note.payload, named)
                if woken or named:
                    for note in conn.notifies(timeout=0.0):
                        woken |= _take(note.payload, named)
            if self._stop.is_set():
                if named_rows is not None:
                    named_rows.write_record()
                return
            older_than = None
            if named_rows is not None:
                woken, older_than = named_rows.take(named, woken=woken)
            elif named:
                woken = True
            if woken:
                self._relay_here(older_than)

    def _relay_here(self, older_than: float | None = None) -> None:
        try:
            self.relay_due(older_than=older_than)
        except TRANSIENT_ERRORS as exc:  # the broker or the database is away: swept later
            log.warning("relay after a wake-up failed: %s", exc)


def _take(payload: str, named: list[str]) -> bool:
    """Add the ids ``payload`` names to ``named``; True when it names none (a wake-up
    from a writer of an earlier version: a claiming pass)."""
    ids = parse_wake(payload)
    if ids is None:
        return True
    named.extend(ids)
    return False


class NamedRows:
    """The leading listener's relay of the rows a wake-up names, without a claim.

    One listener per database leads: the one whose listening connection holds
    the advisory lock :data:`LEADER_LOCK` (a session lock: a leader that dies
    or loses its connection frees it, and a follower takes it at its next try,
    within ``wait_seconds``, then claims what was left). The leader reads the
    named rows on its listening connection (:func:`outbox.notified.read_due`:
    one ``SELECT``, only due rows) and relays them in one round trip
    (:meth:`outbox.relay.Relay.relay_read`); no claim, so no ``UPDATE`` and
    no commit before the broker is called. Two relays sending a row at once
    still make one message: only on a target that keeps one half and one
    commit per ``tx_id`` (broker_lite). A follower claims only rows older than
    ``follower_grace`` (:data:`FOLLOWER_GRACE`): under a burst the leader's lag
    is shared out. The leader's record is fenced on no live claim.
    docs/outbox.md, "The notified rows, read without a claim".
    """

    def __init__(self, relay: Relay, conn: Any, *, try_seconds: float = 0.5,
                 catch_up_seconds: float = 0.5, follower_grace: float = FOLLOWER_GRACE
                 ) -> None:
        #: the relay of the named rows (made once: a pass needs no new one)
        self.relay_of_named = relay
        self._conn = conn
        self._try = try_seconds
        self._catch_up = catch_up_seconds
        self._grace = follower_grace
        self._next_try = 0.0
        self._next_catch_up = 0.0
        self._named_since = False  # named rows relayed since the last catch-up
        self._follow_at: float | None = None  # a follower's next claim (monotonic time)
        self._follow_last = 0.0  # when the rows of the last naming wake-up pass the grace
        self._off = False  # the read failed for a reason a retry does not mend
        #: whether this listener holds the leader lock (on this connection)
        self.leads = False
        #: the last named pass's record, not written yet: it goes with the next read, in
        #: one round trip, or alone before the lane waits or claims
        self.held: tuple[str, dict[str, Any]] | None = None

    def lead(self) -> bool:
        """Try for the leader lock (at most once per ``try_seconds``); True when this
        listener has just become the leader."""
        if self.leads or self._off or time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + self._try
        self.leads = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)",
                                             (LEADER_LOCK,)).fetchone()[0])
        if self.leads:
            log.info("this worker's listener leads: it relays the rows a wake-up names "
                     "without claiming them")
        return self.leads

    def write_record(self) -> None:
        """Write the last named pass's record now, if it is held (:attr:`held`)."""
        import psycopg

        held, self.held = self.held, None
        if held is None:
            return
        try:
            self._conn.execute(held[0], held[1], prepare=False)
        except psycopg.OperationalError:
            raise  # the connection: its rows stay due, and go again as one message each
        except psycopg.Error as exc:
            log.warning("recording a pass of named rows failed (%s); they stay due, and a "
                        "claiming pass sends them again as one message each", exc)

    def take(self, named: list[str], *, woken: bool) -> tuple[bool, float | None]:
        """:meth:`_take_named`; the held record is written before any claiming pass."""
        claim, older_than = self._take_named(named, woken=woken)
        if claim:
            self.write_record()
        return claim, older_than

    def _take_named(self, named: list[str], *, woken: bool) -> tuple[bool, float | None]:
        """A wake-up naming ``named`` (``woken``: and one naming none): relay the named rows
        now where this listener leads. Returns whether a claiming pass follows, and over
        rows committed how long ago (None: every due row).

        A claiming pass follows where a wake-up named no row, where this listener
        has just become the leader (the rows the last one left), and where a named
        row could not go unclaimed. A leader that relayed named rows also catches
        up: one claiming pass once ``catch_up_seconds`` have gone by since its last
        (the rows of a lost wake-up, which would otherwise wait for the sweeper;
        ``named`` is empty when the wait for a wake-up timed out). A follower
        claims the rows committed more than ``follower_grace`` ago, once that much
        time has gone by since a wake-up named rows: what the leader has not taken
        by then, or all of it when no listener leads (a lock held by a session that
        is not a listener: the rows go a grace later, through claims).
        """
        if self.lead():
            self._next_catch_up = time.monotonic() + self._catch_up
            return True, None
        if woken:
            return True, None
        if not self.leads:
            return self._follow(named)
        if named and self.relay(named):
            return True, None
        self._named_since |= bool(named)
        if self._named_since and time.monotonic() >= self._next_catch_up:
            self._named_since = False
            self._next_catch_up = time.monotonic() + self._catch_up
            return True, None
        return False, None

    def wait(self, longest: float) -> float:
        """How long the lane may wait for a wake-up: at most until a follower's claim."""
        if self._follow_at is None:
            return longest
        return max(0.0, min(longest, self._follow_at - time.monotonic()))

    def _follow(self, named: list[str]) -> tuple[bool, float | None]:
        """A follower's answer: a claim of the rows older than the grace, once the grace
        has gone by since the first wake-up naming rows that no claim has covered yet."""
        now = time.monotonic()
        if named:
            self._follow_last = now + self._grace  # when the last named rows are old enough
            if self._follow_at is None:
                self._follow_at = self._follow_last
        if self._follow_at is not None and now >= self._follow_at:
            # rows named after the first are younger: one more claim for them, later
            self._follow_at = self._follow_last if self._follow_last > now else None
            return True, self._grace
        return False, None

    def relay(self, tx_ids: list[str]) -> bool:
        """Relay the due rows among ``tx_ids``; True when a claiming pass must follow (a due
        row that cannot go unclaimed, a row not relayed, or more rows than a pass)."""
        import psycopg

        relay = self.relay_of_named
        if len(tx_ids) > relay.settings.batch_size:  # a burst: the claiming passes drain it
            return True
        try:
            held, self.held = self.held, None
            due = read_due(self._conn, tx_ids, record=held)
        except psycopg.OperationalError:
            raise  # the connection: the listener listens again
        except psycopg.Error as exc:
            self._off, self.leads = True, False
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK,))
            log.warning("this listener cannot read the rows a wake-up names (%s); it claims "
                        "them instead, as the other workers' listeners do", exc)
            return True
        if not due.rows:
            return due.need_claim
        try:
            done = relay.relay_read(due.rows, hold_record=True)
        except TRANSIENT_ERRORS as exc:  # the broker is away: the claims retry, and back off
            log.warning("relay after a wake-up failed: %s", exc)
            return False
        self.held = done.record
        return due.need_claim or done.left_due


class ListenStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Start the wake-up listener with the worker (main process), stop it with the worker."""

    label = "rocketbox wake-up listener"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._listener: Listener | None = None

    def start(self, worker: Any) -> None:
        state = rocketbox_state(worker.app)
        self._listener = Listener(state, on_fatal=state.report_fatal)
        self._listener.start()
        log.info("wake-up listener on %s", CHANNEL)

    def stop(self, worker: Any) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
