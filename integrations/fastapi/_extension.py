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
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import URL
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from integrations._assembly import Assembly, OutboxOptions, base_outbox, with_celery
from integrations.fastapi._decorator import transactional_message
from integrations.fastapi._request import bind_request_session, request_session
from outbox.config import Mode, Outbox, RelaySettings
from outbox.errors import ConfigurationError
from outbox.migrate import engine_for
from outbox.migrate import sync_url as migrate_sync_url
from outbox.serializers import Serializer
from outbox.targets import ProcessPublishers, Publisher
from outbox.targets.choose import publisher_for

if TYPE_CHECKING:
    from celery import Celery


__all__ = ["Rocketbox", "request_session", "sync_url"]

F = TypeVar("F", bound=Callable[..., Any])

def sync_url(url: str | URL) -> URL:
    """The sync twin of an async database URL (asyncpg/psycopg async: psycopg 3; aiosqlite:
    sqlite3), for the relay and the commands: :func:`outbox.migrate.sync_url`."""
    return migrate_sync_url(url, setting="database")


class Rocketbox:
    """rocketbox for one FastAPI app (or any asyncio code with ``AsyncSession`` s).

    ``database`` is an async SQLAlchemy URL or an :class:`AsyncEngine`;
    ``engine_options`` go to ``create_async_engine``. ``celery_broker``
    ``None`` means kombu's SQLAlchemy transport on the database (``sqla+``
    and its sync URL), ``""`` no Celery (run the sweeper yourself), as in
    the Flask integration. The other keywords are :class:`Outbox` 's, the
    settings the Flask and Django integrations take too
    (:class:`integrations._assembly.OutboxOptions`); ``mode="half_first"``
    sends each message's half before the commit, as there.
    """

    def __init__(self, database: str | URL | AsyncEngine, *, broker: str = "127.0.0.1:10911",
                 producer_group: str = "rocketbox", mode: Mode = "outbox",
                 rollback_on_error_status: bool = True,
                 serializer: Serializer | None = None, relay: RelaySettings | None = None,
                 local_tx_timeout: float = 60.0, celery_broker: str | None = None,
                 celery_backend: str | None = None, celery_settings: Any = None,
                 access_key: str | None = None, secret_key: str | None = None,
                 max_body_size: int | None = None,
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
        self.mode: Mode = mode
        self._options = OutboxOptions(
            broker=broker, producer_group=producer_group, mode=mode, serializer=serializer,
            relay=relay, local_tx_timeout=local_tx_timeout, access_key=access_key,
            secret_key=secret_key, max_body_size=max_body_size, celery_broker=celery_broker,
            celery_backend=celery_backend, celery_settings=celery_settings)
        self.base_outbox = base_outbox(engine_for(sync_url(self.engine.url)), self._options)
        self._lock = threading.Lock()
        self._built: Assembly | None = None
        self._publishers = ProcessPublishers(lambda: publisher_for(self.outbox))

    # -- the Celery side, made on first use ------------------------------------------

    def _build(self) -> Assembly:
        with self._lock:
            if self._built is None:
                self._built = with_celery(self.base_outbox, self._options)
            return self._built

    @property
    def outbox(self) -> Outbox:
        """The outbox views publish to (``on_commit`` enqueues the relay task)."""
        return self._build().outbox

    @property
    def celery(self) -> Celery | None:
        return self._build().celery

    @property
    def celery_broker(self) -> str | None:
        return self._build().celery_broker

    # -- in the app ----------------------------------------------------------------------

    async def session(self) -> AsyncIterator[AsyncSession]:
        """The dependency: ``session: AsyncSession = Depends(rocketbox.session)``.

        A decorated view runs in this session's transaction and commits it
        with its messages; in an undecorated view, commit it yourself (what
        is left open is rolled back when the request ends).
        """
        async with self.sessions() as session:
            bind_request_session(self, session)
            yield session

    def transactional_message(self, topic: str | None = None, *, tag: str | None = None,
                              keys: Any = None, message_group: Any = None,
                              headers: Mapping[str, Any] | None = None,
                              mode: Mode | None = None,
                              body: Callable[[Any], Any] | None = None
                              ) -> Callable[[F], F]:
        """The decorator (see :mod:`integrations.fastapi._decorator`)."""
        return transactional_message(self, topic, tag=tag, keys=keys,
                                     message_group=message_group, headers=headers, mode=mode,
                                     body=body)

    def publisher(self) -> Publisher:
        """The broker seam for ``half_first`` mode, one per process (made on first use)."""
        return self._publishers.get()

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
        await asyncio.to_thread(self._publishers.close)
