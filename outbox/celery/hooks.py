"""The ``Outbox.on_commit`` hook that enqueues ``rocketbox.relay`` after a commit.

One task per commit caps the relay at what a worker can dequeue (a few
hundred tasks a second: each costs Celery two broker round trips, and the
task its own claim), so at a steady load tasks pile up and latency grows
without bound. The hook therefore coalesces: a commit when no task went out
for ``CelerySettings.enqueue_window`` seconds enqueues at once (an idle app
adds no delay); commits inside the window are collected and go out together
in one task when it closes, sent by a background thread. So each process
enqueues at most one task per window, whatever its commit rate, and a row
waits at most one window longer than it would have. ``enqueue_window = 0``
gives the old one-task-per-commit hook.

With ``CelerySettings.listen`` (the default) on PostgreSQL the hook sends no
task: the workers are woken through ``NOTIFY rocketbox_relay``, sent with
the commit by ``publish()`` itself (:class:`WakeHook`), their listeners
relay the rows at once, and the sweeper relays whatever a lost notification
left (:mod:`outbox.celery.listen`). The coalescing below is the path of
SQLite and of ``listen=False``.

It never raises into the caller's commit: when the Celery broker (Redis, or
the SQLite queue table) cannot take the task, it logs a warning and returns,
and the beat sweeper relays the rows a few seconds later. Ids collected but
not yet sent when the process dies are covered the same way: nothing is
lost, because the rows are already committed.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from celery import Celery
from sqlalchemy import Engine

from outbox.celery.listen import CHANNEL, can_listen, notify
from outbox.celery.state import rocketbox_state
from outbox.celery.tasks import RELAY_TASK

__all__ = ["CoalescingHook", "WakeHook", "celery_on_commit"]

log = logging.getLogger("rocketbox.celery")

Send = Callable[[list[str]], None]


def celery_on_commit(app: Celery, *,
                     window: float | None = None) -> Callable[[Sequence[str]], None]:
    """The callable for ``Outbox(on_commit=...)``: ``rocketbox.relay`` tasks for committed ids.

    ``window`` (seconds) defaults to the app's ``CelerySettings.enqueue_window``;
    0 enqueues one task per commit.
    """
    state = rocketbox_state(app)
    window = state.settings.enqueue_window if window is None else window
    chunk = state.outbox.relay.batch_size

    def send(ids: list[str]) -> None:
        task = app.tasks[RELAY_TASK]
        # a task claims at most batch_size rows of its ids: larger sets are split
        for start in range(0, len(ids), chunk):
            part = ids[start:start + chunk]
            try:
                task.apply_async(args=[part], retry=False)
            except Exception as exc:  # never into the commit: the sweeper relays these rows
                log.warning("could not enqueue %s for %d message(s), the sweeper will relay "
                            "them: %s", RELAY_TASK, len(part), exc, extra={"tx_ids": part})

    if state.settings.listen and can_listen(state.outbox.engine):
        return WakeHook(state.outbox.engine)
    if window <= 0:
        def on_commit(tx_ids: Sequence[str]) -> None:
            if tx_ids:
                send(list(tx_ids))

        return on_commit
    return CoalescingHook(send, window)


class WakeHook:
    """The hook with ``CelerySettings.listen`` on PostgreSQL: the listening relays are woken.

    :func:`outbox.publish.publish` reads :attr:`wake_channel`: a row written
    with its own ``INSERT`` carries ``pg_notify(wake_channel, payload)`` in
    that statement (the payload names the row: :mod:`outbox.notified`), so
    PostgreSQL delivers the wake-up with the commit itself (no statement and
    no second connection after it; nothing to lose if the process dies right
    after the commit), and that row's id never reaches this hook. A row sent
    with the ``COMMIT`` (:mod:`outbox.at_commit`) or a caller handing ids on
    by itself (the Flask and Django units) calls the hook, which sends
    ``NOTIFY`` after the commit, naming the ids (:func:`notify`).
    """

    #: the channel :func:`outbox.publish.publish` notifies inside the transaction
    wake_channel = CHANNEL

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __call__(self, tx_ids: Sequence[str]) -> None:
        if tx_ids:
            # the listening workers relay at once (outbox.celery.listen)
            notify(self._engine, tx_ids)


class CoalescingHook:
    """Collects committed ids; sends them at most once per ``window`` seconds (see module doc).

    Thread-safe. After a fork the child starts empty, with its own sender
    thread (the parent sends what it had collected). At interpreter exit
    whatever is still collected is sent.
    """

    def __init__(self, send: Send, window: float) -> None:
        self._send = send
        self._window = window
        self._setup()
        atexit.register(self.flush)

    def _setup(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[str] = []
        self._last_sent = float("-inf")
        self._due: float | None = None  # when the collected ids go out
        self._thread: threading.Thread | None = None

    def __call__(self, tx_ids: Sequence[str]) -> None:
        if not tx_ids:
            return
        if os.getpid() != self._pid:
            self._setup()
        now = time.monotonic()
        with self._lock:
            self._pending.extend(tx_ids)
            if self._due is not None:  # a send is already scheduled: ride along
                return
            if now - self._last_sent < self._window:
                self._due = self._last_sent + self._window
                self._start_thread()
                self._wake.notify()
                return
            batch = self._take(now)
        self._send(batch)

    def flush(self) -> None:
        """Send whatever is collected now (for shutdown, and tests)."""
        with self._lock:
            if os.getpid() != self._pid or not self._pending:
                return
            batch = self._take(time.monotonic())
        self._send(batch)

    def _take(self, now: float) -> list[str]:
        batch, self._pending = self._pending, []
        self._last_sent, self._due = now, None
        return batch

    def _start_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="rocketbox-enqueue",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._due is None:
                    self._wake.wait()
                delay = self._due - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                batch = self._take(time.monotonic())
            if batch:
                try:
                    self._send(batch)
                except Exception:  # send() logs its own failures; never kill the thread
                    log.exception("enqueueing %s failed", RELAY_TASK)
