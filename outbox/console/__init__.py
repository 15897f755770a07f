"""An operations console for the outbox and broker_lite: server-rendered web pages.

``rocketbox console --db URL --broker ADDR`` (or ``broker-lite serve
--console-port``) serves it; docs/console.md describes each page. The pages:
overview, outbox rows (replay), topics (create), consumer groups (reset an
offset), message lookup and ``/trace/<tx_id>``, transactions, dead letters
(resend), audit. Needs the ``console`` extra (Starlette, Jinja2, uvicorn).
"""

from __future__ import annotations

from outbox.console.app import create_app
from outbox.console.config import ConsoleConfig, ConsoleConfigError, is_loopback
from outbox.console.server import ConsoleThread, serve

__all__ = ["ConsoleConfig", "ConsoleConfigError", "ConsoleThread", "create_app", "is_loopback",
           "serve"]
