"""The console's ASGI app: Starlette routes, Jinja2 templates, vendored static files.

:func:`create_app` builds it from a :class:`ConsoleConfig`; the app owns one
database engine, one broker admin connection and one :class:`Sampler`, made
at startup and closed at shutdown. Handlers are plain functions (Starlette
runs them in its thread pool), so the database and the sync admin client are
used as everywhere else in rocketbox.

The pages' shared parts (:class:`Console`, :func:`render`, :func:`confirm_or_run`)
live in :mod:`outbox.console.handlers`. :mod:`outbox.console.guard` wraps
everything (framing, Host, Origin and the session behind the CSRF token).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy import Engine, create_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from broker_lite.client import Admin
from broker_lite.errors import BrokerError
from outbox.console import pages_broker, pages_outbox
from outbox.console.auth import CredentialGate
from outbox.console.broker_link import BrokerLink
from outbox.console.config import ConsoleConfig
from outbox.console.guard import BrowserGuard
from outbox.console.handlers import (
    Console,
    confirm_or_run,
    console_of,
    parse_input,
    render,
)
from outbox.console.sampler import Sampler
from outbox.errors import BrokerUnreachableError
from outbox.targets.address import redacted_address

__all__ = ["Console", "confirm_or_run", "console_of", "create_app", "parse_input", "render"]

log = logging.getLogger("rocketbox.console")


def _broker_outage(request: Request, exc: Exception) -> Response:
    """A broker page while the broker cannot answer: the outage, not a bare 500."""
    console = console_of(request)
    log.warning("console: %s: broker unavailable: %s", request.url.path, exc)
    since = console.sampler.state.broker_down_since
    return render(request, "broker_down.html", status_code=503,
                  address=redacted_address(console.config.broker),
                  reason=str(exc) if isinstance(exc, BrokerUnreachableError)
                  else f"{type(exc).__name__}: {exc}", since=since)


def create_app(config: ConsoleConfig, *, engine: Engine | None = None,
               admin: Admin | None = None) -> Starlette:
    """The console app. ``engine``/``admin`` are made from the config when not given."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own_engine = engine is None and config.db_url is not None
        db = create_engine(config.db_url, pool_pre_ping=True) if own_engine \
            and config.db_url else engine
        # the broker may be down: connect on first use, so the console starts anyway
        link = BrokerLink(config.broker, lambda: Admin(
            config.broker, access_key=config.access_key, secret_key=config.secret_key),
            given=admin)
        inbox_engines = [(name, create_engine(url, pool_pre_ping=True))
                         for name, url in config.inbox_dbs]
        sampler = Sampler(db, link, every=config.sample_seconds, history=config.history)
        app.state.console = Console(config, db, link, sampler, inbox_engines)
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()
            link.close()
            for _name, other in inbox_engines:
                other.dispose()
            if own_engine and db is not None:
                db.dispose()

    static = StaticFiles(packages=[("outbox.console", "static")])
    routes = [*pages_outbox.ROUTES, *pages_broker.ROUTES,
              Mount("/static", app=static, name="static")]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={BrokerError: _broker_outage,
                                        ConnectionError: _broker_outage,
                                        BrokerUnreachableError: _broker_outage})
    app.add_middleware(CredentialGate, config=config)
    app.add_middleware(BrowserGuard, config=config)  # outermost: it runs first
    return app
