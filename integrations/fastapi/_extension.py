"""FastAPI's :class:`Rocketbox`: the async engine, the outbox, and the session dependency.

::

    rocketbox = Rocketbox("postgresql+asyncpg://shop@db/shop", broker="127.0.0.1:10911")
    app = FastAPI(lifespan=rocketbox.lifespan)

    @app.post("/orders", status_code=201)
    @rocketbox.transactional_message(topic="Orders", body=lambda rv: rv)
    async def create_order(data: OrderIn,
                           session: AsyncSession = Depends(rocketbox.session)) -> dict:
        session.add(Order(...))
        await session.flush()
        return {...}

The views write through SQLAlchemy's asyncio extension (asyncpg, psycopg's
async driver, aiosqlite); the relay, the check-back responder and the status
command are sync and connect to the same database through the matching sync
driver (psycopg 3, or sqlite3): :attr:`Rocketbox.outbox` holds that engine.
docs/async.md has the whole contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import URL
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from outbox.config import Outbox, RelaySettings
from outbox.errors import ConfigurationError
from outbox.migrate import engine_for
from outbox.migrate import sync_url as migrate_sync_url
from outbox.serializers import JsonSerializer, Serializer

if TYPE_CHECKING:
    from celery import Celery


__all__ = ["Rocketbox", "request_session", "sync_url"]

F = TypeVar("F", bound=Callable[..., Any])

#: the request's session, set by the :meth:`Rocketbox.session` dependency
_request_session: ContextVar[tuple[Rocketbox, AsyncSession] | None] = ContextVar(
    "rocketbox_request_session", default=None)


def sync_url(url: str | URL) -> URL:
    """The sync twin of an async database URL (asyncpg/psycopg async: psycopg 3; aiosqlite:
    sqlite3), for the relay and the commands: :func:`outbox.migrate.sync_url`."""
    return migrate_sync_url(url, setting="database")


def request_session(rocketbox: Rocketbox) -> AsyncSession | None:
    """The session ``rocketbox.session`` gave the running request, if it did."""
    bound = _request_session.get()
    return bound[1] if bound is not None and bound[0] is rocketbox else None


class Rocketbox:
    """rocketbox for one FastAPI app (or any asyncio code with ``AsyncSession`` s).

    ``database`` is an async SQLAlchemy URL or an :class:`AsyncEngine`;
    ``engine_options`` go to ``create_async_engine``. ``celery_broker``
    ``None`` means kombu's SQLAlchemy transport on the database (``sqla+``
    and its sync URL), ``""`` no Celery (run the sweeper yourself), as in
    the Flask integration. The other keywords are :class:`Outbox` 's.
    """

    def __init__(self, database: str | URL | AsyncEngine, *, broker: str = "127.0.0.1:10911",
                 producer_group: str = "rocketbox", rollback_on_error_status: bool = True,
                 serializer: Serializer | None = None, relay: RelaySettings | None = None,
                 local_tx_timeout: float = 60.0, celery_broker: str | None = None,
                 celery_backend: str | None = None, celery_settings: Any = None,
                 access_key: str | None = None, secret_key: str | None = None,
                 engine_options: Mapping[str, Any] | None = None) -> None:
        if isinstance(database, AsyncEngine):
            self.engine = database
        else:
            sync_url(database)  # a database rocketbox supports, before any driver is loaded
            try:
                self.engine = _create_async_engine(database, **dict(engine_options or {}))
            except ModuleNotFoundError as exc:
                raise ConfigurationError(f"database: the async driver is not installed (no "
                                         f"module {exc.name!r})", setting="database") from exc
            except InvalidRequestError as exc:  # a sync driver in the URL
                raise ConfigurationError(
                    f"the FastAPI integration needs an async driver (postgresql+asyncpg, "
                    f"postgresql+psycopg_async, sqlite+aiosqlite): {exc}") from exc
        self.sessions: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self.engine, expire_on_commit=False)
        self.rollback_on_error_status = rollback_on_error_status
        #: the outbox without ``on_commit`` (what the relay worker runs with), on the sync
        #: twin of the database (engines connect on first use, not here)
        self.base_outbox = Outbox(
            engine=engine_for(sync_url(self.engine.url)), broker=broker,
            producer_group=producer_group, serializer=serializer or JsonSerializer(),
            relay=relay or RelaySettings(), local_tx_timeout=local_tx_timeout,
            access_key=access_key, secret_key=secret_key)
        self._celery_settings = (celery_broker, celery_backend, celery_settings)
        self._lock = threading.Lock()
        self._built: tuple[Outbox, Celery | None, str | None] | None = None

    # -- the Celery side, made on first use ------------------------------------------

    def _build(self) -> tuple[Outbox, Celery | None, str | None]:
        with self._lock:
            if self._built is None:
                base = self.base_outbox
                broker, backend, settings = self._celery_settings
                if broker is None:
                    broker = "sqla+" + base.engine.url.render_as_string(hide_password=False)
                celery: Celery | None = None
                outbox = base
                if broker:
                    from outbox.celery import celery_on_commit, make_celery

                    celery = make_celery(base, broker_url=broker, backend_url=backend,
                                         settings=settings)
                    outbox = dataclasses.replace(base, on_commit=celery_on_commit(celery))
                self._built = (outbox, celery, broker or None)
            return self._built

    @property
    def outbox(self) -> Outbox:
        """The outbox views publish to (``on_commit`` enqueues the relay task)."""
        return self._build()[0]

    @property
    def celery(self) -> Celery | None:
        return self._build()[1]

    @property
    def celery_broker(self) -> str | None:
        return self._build()[2]

    # -- in the app ----------------------------------------------------------------------

    async def session(self) -> AsyncIterator[AsyncSession]:
        """The dependency: ``session: AsyncSession = Depends(rocketbox.session)``.

        A decorated view runs in this session's transaction and commits it
        with its messages; in an undecorated view, commit it yourself (what
        is left open is rolled back when the request ends).
        """
        async with self.sessions() as session:
            _request_session.set((self, session))  # the request's task ends with it
            yield session

    def transactional_message(self, topic: str | None = None, *, tag: str | None = None,
                              keys: Any = None, message_group: Any = None,
                              headers: Mapping[str, Any] | None = None,
                              body: Callable[[Any], Any] | None = None
                              ) -> Callable[[F], F]:
        """The decorator (see :mod:`integrations.fastapi._decorator`)."""
        from integrations.fastapi._decorator import transactional_message

        return transactional_message(self, topic, tag=tag, keys=keys,
                                     message_group=message_group, headers=headers, body=body)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        """``FastAPI(lifespan=rocketbox.lifespan)``: sets up the Celery side at startup (in
        a thread: that is imports and I/O the first request would otherwise do on the
        loop) and disposes the engines at shutdown."""
        await asyncio.to_thread(self._build)
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Dispose the engines (the sync one in a thread: it may close connections)."""
        await self.engine.dispose()
        await asyncio.to_thread(self.base_outbox.engine.dispose)
