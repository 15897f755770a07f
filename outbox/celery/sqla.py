"""kombu's SQLAlchemy transport, with a ``polling_interval`` that works.

The embedded setup runs Celery on kombu's SQLAlchemy transport over SQLite
(``sqla+sqlite:///celery.sqlite``). Its queue is a table the worker polls,
once a second by default: too slow for a relay. kombu reads
``polling_interval`` from the transport options, but its SQLAlchemy channel
then hands every remaining option to ``create_engine``, which refuses it.
This transport keeps the transport's own options away from the engine, and
gives a SQLite queue WAL and a busy timeout (:mod:`outbox.sqlite`): the web
app enqueues while the worker polls and deletes.
:func:`~outbox.celery.app.make_celery` uses it for ``sqla+`` broker URLs.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import create_engine

from outbox.sqlite import tune_sqlite_engine

__all__ = ["SQLA_PREFIX", "Transport", "transport_settings"]

SQLA_PREFIX = "sqla+"
TRANSPORT_PATH = "outbox.celery.sqla:Transport"

#: transport options that are not create_engine() arguments
_NOT_ENGINE_OPTIONS = frozenset({
    "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
    "interval_start", "interval_step", "interval_max", "retry_errors", "polling_interval",
})


class Channel(kombu_sqla.Channel):
    def _engine_from_config(self) -> Any:
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items()
                   if k not in _NOT_ENGINE_OPTIONS}
        return tune_sqlite_engine(create_engine(conninfo.hostname, **options))


class Transport(kombu_sqla.Transport):
    Channel = Channel


def transport_settings(broker_url: str) -> dict[str, str]:
    """Celery settings that route a ``sqla+`` URL through this transport (else none)."""
    if not broker_url.startswith(SQLA_PREFIX):
        return {}
    return {"broker_url": broker_url[len(SQLA_PREFIX):], "broker_transport": TRANSPORT_PATH}
