"""Async test helpers: migrated databases for the async drivers, and a real ASGI server.

* :func:`async_database`: a migrated SQLite file or fresh PostgreSQL database
  with an ``orders`` table; returns its sync and async URLs;
* :func:`serve_asgi`: uvicorn on a free loopback port, on its own event loop
  in a thread, in asyncio debug mode with ``slow_callback_duration`` set;
  every "Executing ... took N seconds" warning the loop logs is collected.
  Those warnings name the task, not the code that held the loop, so a
  watchdog thread also samples the loop thread's stack every 5 ms while the
  loop has not run its heartbeat callback for 10 ms. Each sample is blamed
  on the innermost frame outside the standard library: rocketbox's own code
  (``outbox/``, ``integrations/``, ``broker_lite/``), the app's or a test's,
  or an installed package's (aiosqlite, for one, starts a thread per new
  connection and waits for it on the loop); waiting in ``Thread.start`` for
  a new thread to be scheduled is the OS's. A stall of ``slow_callback``
  seconds or more is *rocketbox's* when its samples put that much of it in
  rocketbox's code. (C code that holds the GIL cannot be sampled: the
  watchdog sees the stall's end only.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import sysconfig
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from outbox import migrate
from tests.support.waiting import wait_until

__all__ = ["AsgiServer", "Stall", "async_database", "serve_asgi"]

REPO = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
ROCKETBOX_CODE = ("outbox/", "integrations/", "broker_lite/")

#: the async drivers: name -> how a sync URL becomes one
ASYNC_DRIVERS = ("aiosqlite", "asyncpg", "psycopg_async")


def async_database(driver: str, tmp_path: Path, postgres: Any = None) -> tuple[str, str]:
    """(sync URL, async URL) of a migrated database with ``orders (id, item)``."""
    if driver == "aiosqlite":
        sync_url = f"sqlite:///{tmp_path / 'app.sqlite'}"
        async_url = f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite'}"
    else:
        sync_url = postgres.create_database(f"rbas_{uuid.uuid4().hex[:12]}").url
        async_url = sync_url.replace("+psycopg:", f"+{driver}:")
    engine = create_engine(sync_url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)"))
    finally:
        engine.dispose()
    return sync_url, async_url


class _SlowCallbacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing"):
            self.messages.append(message)


@dataclass
class Stall:
    """A stretch of ``held`` seconds in which the loop ran no other callback, and the
    loop thread's stacks sampled in it (``(culprit, stack)`` each, culprit being
    ``path:line`` of the code that held the loop, see :func:`_culprit`)."""

    held: float
    samples: list[tuple[str, str]] = field(default_factory=list)

    @property
    def rocketbox_seconds(self) -> float:
        """The part of the stall the samples put in rocketbox's own code."""
        ours = sum(1 for culprit, _stack in self.samples if culprit.startswith(ROCKETBOX_CODE))
        return self.held * ours / max(1, len(self.samples))

    def report(self) -> str:
        worst = max(self.samples, key=lambda s: s[0].startswith(ROCKETBOX_CODE))
        return (f"{self.held:.3f}s ({self.rocketbox_seconds:.3f}s in rocketbox), "
                f"{len(self.samples)} sample(s), e.g. in {worst[0]}:\n{worst[1]}")


def _culprit(frames: traceback.StackSummary) -> str:
    """Whose code holds the loop: the innermost frame outside the standard library.

    A ``Thread.start()`` waiting for the new thread to run (the executor of
    ``run_in_executor`` starts its threads on first use) is the OS
    scheduler's, whoever called it.
    """
    if any(f.name == "start" and Path(f.filename).name == "threading.py" for f in frames):
        return "thread start"
    for frame in reversed(frames):
        path = Path(frame.filename)
        if frame.filename.startswith("<") or (path.is_relative_to(STDLIB)
                                              and "site-packages" not in path.parts):
            continue
        if path.is_relative_to(REPO) and ".venv" not in path.parts:
            return f"{path.relative_to(REPO)}:{frame.lineno}"
        return f"{frame.filename}:{frame.lineno}"  # an installed package's
    return "?"


class _Watchdog:
    """Samples the loop thread's stack while the loop is held (see the module doc)."""

    #: sample every this often (s) once the loop has been held this long
    EVERY = 0.005
    FROM = 0.01

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float) -> None:
        self.loop = loop
        self.threshold = threshold
        #: the stalls that lasted ``threshold`` or more
        self.stalls: list[Stall] = []
        self.loop_thread = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self) -> None:
        self.loop_thread = threading.get_ident()  # called on the loop's thread
        self._beat()
        self._thread.start()

    def _beat(self) -> None:
        self._last = time.monotonic()
        self.loop.call_later(self.EVERY, self._beat)

    def _watch(self) -> None:
        current: tuple[float, Stall] | None = None
        while not self._stop.wait(self.EVERY):
            last = self._last
            if current is not None and current[0] != last:  # the loop moved on
                if current[1].held >= self.threshold:
                    self.stalls.append(current[1])
                current = None
            held = time.monotonic() - last
            if held < self.FROM:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is None:
                continue
            frames = traceback.extract_stack(frame)
            if current is None:
                current = (last, Stall(held))
            current[1].held = held
            current[1].samples.append((_culprit(frames), "".join(frames.format())))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class AsgiServer:
    address: str
    loop: asyncio.AbstractEventLoop
    #: the loop's slow-callback warnings (``Executing <...> took N seconds``)
    slow: list[str] = field(default_factory=list)
    #: the stalls the watchdog sampled (each over ``slow_callback`` seconds)
    stalls: list[Stall] = field(default_factory=list)

    threshold: float = 0.05

    def rocketbox_stalls(self) -> list[Stall]:
        """Callbacks that spent ``threshold`` or more in rocketbox's own code."""
        return [s for s in self.stalls if s.rocketbox_seconds >= self.threshold]

    def report(self) -> str:
        return "\n".join([*self.slow, *(stall.report() for stall in self.stalls)])


@contextlib.contextmanager
def serve_asgi(app: Any, *, slow_callback: float = 0.05,
               lifespan: str = "auto") -> Iterator[AsgiServer]:
    """Serve ``app`` with uvicorn on 127.0.0.1:<free port>, on a debug-mode loop."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            loop="asyncio", lifespan=lifespan, access_log=False)
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = slow_callback
    handler = _SlowCallbacks()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    failed: list[BaseException] = []
    watchdog = _Watchdog(loop, slow_callback)

    def run() -> None:
        try:
            loop.call_soon(watchdog.start)
            loop.run_until_complete(server.serve())
        except BaseException as exc:
            failed.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or failed, timeout=30,
                   message="uvicorn did not start")
        if failed:
            raise failed[0]
        port = server.servers[0].sockets[0].getsockname()[1]
        yield AsgiServer(f"127.0.0.1:{port}", loop, handler.messages, watchdog.stalls,
                         slow_callback)
    finally:
        server.should_exit = True
        thread.join(30)
        watchdog.stop()
        asyncio_log.removeHandler(handler)
