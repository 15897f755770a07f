"""Run the console: uvicorn on the configured address, in the foreground or on a thread.

:func:`serve` blocks until SIGINT/SIGTERM (``rocketbox console``);
:class:`ConsoleThread` runs it next to something else (``broker-lite serve
--console-port``, and the tests) and says which port it bound.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import uvicorn

from outbox.console.app import create_app
from outbox.console.config import ConsoleConfig

__all__ = ["ConsoleThread", "serve"]

log = logging.getLogger("rocketbox.console")


def _server(config: ConsoleConfig, **app_args: object) -> uvicorn.Server:
    app = create_app(config, **app_args)  # type: ignore[arg-type]
    settings = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                              access_log=False, lifespan="on", server_header=False)
    return uvicorn.Server(settings)


def _bound_port(server: uvicorn.Server) -> int:
    for listener in server.servers:
        for sock in listener.sockets:
            return int(sock.getsockname()[1])
    raise RuntimeError("the console is not listening")


def serve(config: ConsoleConfig) -> None:
    """Serve until interrupted (uvicorn handles SIGINT and SIGTERM)."""
    server = _server(config)
    server.run()


class ConsoleThread:
    """The console on a daemon thread with its own event loop; ``url`` once started."""

    def __init__(self, config: ConsoleConfig, **app_args: object) -> None:
        self.config = config
        self._server = _server(config, **app_args)
        self._thread = threading.Thread(target=self._run, name="rocketbox-console",
                                        daemon=True)
        self.port = 0

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def start(self, timeout: float = 30.0) -> ConsoleThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while (not self._server.started and self._thread.is_alive()
               and time.monotonic() < deadline):
            self._thread.join(0.02)  # uvicorn sets ``started`` once it listens
        if not self._server.started:
            raise RuntimeError(f"the console did not start on {self.config.host}:"
                               f"{self.config.port}")
        self.port = _bound_port(self._server)
        log.info("console listening on %s", self.url)
        return self

    @property
    def url(self) -> str:
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
