"""Start a real ``broker_lite serve`` on ports it picks, and always stop it.

Like the servers of :mod:`tests.support.servers`: a context manager starts the broker
in its own process group, waits for its ready line (never a bare sleep),
yields a :class:`BrokerLiteServer`, and on exit stops the whole group.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from procgroup import Process, ProcessError

from .servers import REPO_ROOT, START_TIMEOUT, STOP_TIMEOUT, ServerStartError

__all__ = ["BrokerLiteServer", "StartBroker", "broker_starter", "start_broker_lite"]

_BROKER_READY = re.compile(
    r"^broker_lite ready native=(?P<native>\S+:\d+) grpc=(?P<grpc>\S+:\d+)[ \t\r]*\n", re.MULTILINE
)


@dataclass(frozen=True)
class BrokerLiteServer:
    """A ``broker_lite serve`` process that has printed its ready line.

    ``native`` and ``grpc`` are ``"host:port"`` as the broker announced them.
    """

    native: str
    grpc: str
    data_dir: Path
    process: Process = field(compare=False, repr=False)

    @property
    def stdout_lines(self) -> list[str]:
        """The lines the broker printed on stdout, ready line included."""
        return self.process.output().splitlines()

    def stderr_text(self) -> str:
        return self.process.errors()

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Send ``sig`` to the broker's process group; SIGKILL after ``timeout``.

        Returns the exit code (negative for death by signal). Safe to call
        more than once.
        """
        code = self.process.stop(sig, timeout)
        assert code is not None  # started before this object was made
        return code

    def kill(self) -> int:
        """Crash the broker with SIGKILL, as a power cut would."""
        return self.stop(signal.SIGKILL)


@contextlib.contextmanager
def start_broker_lite(
    data_dir: Path,
    extra_args: Sequence[str] = (),
    *,
    timeout: float = START_TIMEOUT,
    command: Sequence[str] | None = None,
) -> Iterator[BrokerLiteServer]:
    """Run ``broker_lite serve`` on ports picked by the broker, wait for its ready line.

    The command is ``python -m broker_lite serve --data-dir D --port 0
    --grpc-port 0 --auto-create-topics *extra_args``; ``command`` replaces the ``python -m
    broker_lite`` part (a stand-in in tests of this helper, or a broker with a test
    hook: :mod:`tests.support.double_commit_broker`). The broker's stdout and stderr go to
    temp files deleted on exit; ``data_dir`` is the caller's and is kept.

    Raises:
        ServerStartError: the process exited, or printed no ready line within
            ``timeout`` seconds; the message has its stdout and stderr.
    """
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    prefix = list(command) if command is not None else [sys.executable, "-m", "broker_lite"]
    ports = ("--port", "0", "--grpc-port", "0")
    # tests send to topics they never create; a test of the default passes
    # --no-auto-create-topics in extra_args (the last one wins)
    argv = [*prefix, "serve", "--data-dir", os.fspath(data_dir), *ports,
            "--auto-create-topics", *extra_args]
    log_dir = Path(tempfile.mkdtemp(prefix="rocketbox-broker-"))
    proc = Process(argv, log=log_dir / "stdout.log", stderr=log_dir / "stderr.log",
                   env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO_ROOT,
                   name="broker_lite")
    try:
        proc.start()
        try:
            ready = proc.wait_for(_BROKER_READY, timeout, interval=0.02)
        except ProcessError as exc:
            raise ServerStartError(f"{' '.join(argv)}\n{exc}") from exc
        yield BrokerLiteServer(ready["native"], ready["grpc"], data_dir, proc)
    finally:
        proc.stop(timeout=STOP_TIMEOUT)
        shutil.rmtree(log_dir, ignore_errors=True)


#: what :func:`broker_starter` returns: ``start(*extra_args, data_dir=None)``
StartBroker = Callable[..., contextlib.AbstractContextManager[BrokerLiteServer]]


def broker_starter(root: Path, base_args: Sequence[str] = (), *,
                   command: Sequence[str] | None = None) -> StartBroker:
    """For a fixture that lets its test start brokers: ``start(*extra, data_dir=None)`` runs
    :func:`start_broker_lite` (with ``command``) on ``base_args`` then ``extra``, in
    ``data_dir`` (a restart on the same data) or ``root / "broker"``."""

    def start(*extra: str, data_dir: Path | None = None
              ) -> contextlib.AbstractContextManager[BrokerLiteServer]:
        return start_broker_lite(data_dir or root / "broker", [*base_args, *extra],
                                 command=command)

    return start
