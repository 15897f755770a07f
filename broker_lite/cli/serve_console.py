"""``broker-lite serve --console-port``: the operations console next to a broker alone.

The console is ``rocketbox console`` (:mod:`outbox.console`, the ``console``
extra). ``broker_lite`` sits below ``outbox`` and imports nothing of it, so
the broker runs the console as a child process once its doors listen,
pointed at its own native door, without a database (the broker's pages
work; the outbox pages say there is none). The child's ready line becomes
``console listening on http://HOST:PORT`` on the broker's stderr (stdout keeps
its one ready line); the child ends with the broker.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import threading

from broker_lite.errors import ConfigurationError
from broker_lite.runtime import is_loopback

__all__ = ["ConsoleProcess", "add_arguments", "console_command"]

log = logging.getLogger("broker_lite.server")

_PR_SET_PDEATHSIG = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("operations console (needs: pip install 'rocketbox[console]')")
    group.add_argument("--console-port", type=int, default=None, metavar="PORT",
                       help="run `rocketbox console` for this broker on this port (0 picks "
                            "one); off if unset")
    group.add_argument("--console-host", default="127.0.0.1", metavar="HOST",
                       help="the console's address (default: 127.0.0.1); anything else needs "
                            "--console-token or the console's ACL keys")
    group.add_argument("--console-allowed-host", action="append", default=[], metavar="NAME",
                       help="a host name browsers may reach the console by, besides its address "
                            "and localhost (repeatable; `rocketbox console --allowed-host`)")
    group.add_argument("--console-token", default=os.environ.get("ROCKETBOX_CONSOLE_TOKEN"),
                       metavar="TOKEN",
                       help="password every console request must carry (HTTP Basic, any user "
                            "name); env ROCKETBOX_CONSOLE_TOKEN")
    group.add_argument("--console-access-key", default=None, metavar="KEY",
                       help="with --acl: an admin account the console connects as (its keys "
                            "also log in to the console)")
    group.add_argument("--console-secret-key", default=os.environ.get("ROCKETBOX_SECRET_KEY"),
                       metavar="KEY", help="that account's secret key (env ROCKETBOX_SECRET_KEY)")


def console_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]] | None:
    """The console's command line (the broker address is appended once known) and its
    environment (secrets stay off the command line); ``None`` without ``--console-port``.

    Raises ``ValueError`` naming the setting when the console could not run.
    """
    if args.console_port is None:
        return None
    if not 0 <= args.console_port <= 65535:
        raise ConfigurationError(f"--console-port must be 0..65535, got {args.console_port}",
                                 setting="--console-port")
    if bool(args.console_access_key) != bool(args.console_secret_key):
        raise ConfigurationError("--console-access-key and --console-secret-key go together",
                                 setting="--console-access-key, --console-secret-key")
    if not is_loopback(args.console_host) and not (args.console_token
                                                   or args.console_access_key):
        raise ConfigurationError(
            f"--console-host {args.console_host!r} is not loopback: the console "
            "needs credentials there (--console-token, or --console-access-key "
            "and --console-secret-key)", setting="--console-host")
    missing = [name for name in ("starlette", "jinja2", "uvicorn", "python_multipart")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(f"--console-port needs the console extra (missing: "
                                 f"{', '.join(missing)}): pip install 'rocketbox[console]'",
                                 setting="--console-port")
    argv = [sys.executable, "-m", "outbox", "console", "--host", args.console_host,
            "--port", str(args.console_port), "--log-level", "WARNING"]
    for name in args.console_allowed_host:
        argv += ["--allowed-host", name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
    for name, value in (("ROCKETBOX_CONSOLE_TOKEN", args.console_token),
                        ("ROCKETBOX_ACCESS_KEY", args.console_access_key),
                        ("ROCKETBOX_SECRET_KEY", args.console_secret_key)):
        if value:
            env[name] = value
    return argv, env


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the broker process dies, however it dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


class ConsoleProcess:
    """``rocketbox console`` as a child of the broker."""

    def __init__(self, command: tuple[list[str], dict[str, str]]) -> None:
        self.argv, self.env = command
        self._proc: subprocess.Popen[str] | None = None

    def start(self, native: str) -> None:
        """Start it against ``native`` (HOST:PORT, listening); returns at once."""
        self._proc = subprocess.Popen(
            [*self.argv, "--broker", native], env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
        threading.Thread(target=self._relay_stdout, name="broker-lite-console",
                         daemon=True).start()

    def _relay_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("rocketbox console ready url="):
                log.info("console listening on %s", line.strip().split("url=", 1)[1])
        code = self._proc.wait()
        if code not in (0, -signal.SIGTERM):
            log.error("the console exited with %s (its errors are above)", code)

    def stop(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
