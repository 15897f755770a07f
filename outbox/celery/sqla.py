"""kombu's SQLAlchemy transport, with a ``polling_interval`` that works.

The embedded setup runs Celery on kombu's SQLAlchemy transport over SQLite
(``sqla+sqlite:///celery.sqlite``). Its queue is a table the worker polls,
once a second by default: too slow for a relay. kombu reads
``polling_interval`` from the transport options, but its SQLAlchemy channel
then hands every remaining option to ``create_engine``, which refuses it.
This transport keeps the transport's own options away from the engine.
:func:`~outbox.celery.app.make_celery` uses it for ``sqla+`` broker URLs.

kombu reads a ``+`` in a URL's scheme as ``transport+URL``, so a
driver-qualified database URL (``postgresql+psycopg://...``) after the
``sqla+`` made it look for a transport named ``postgresql``. So kombu is given
the URL without its driver, which it only shows and uses as a cache key, and
the engine is made from the whole URL, passed in the transport options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import create_engine, make_url

__all__ = ["SQLA_PREFIX", "Transport", "transport_settings"]

SQLA_PREFIX = "sqla+"
TRANSPORT_PATH = "outbox.celery.sqla:Transport"
#: transport option: the database URL as given, driver included
URL_OPTION = "rocketbox_db_url"

#: transport options that are not create_engine() arguments
_NOT_ENGINE_OPTIONS = frozenset({
    "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
    "interval_start", "interval_step", "interval_max", "retry_errors", "polling_interval",
    URL_OPTION,
})


class Channel(kombu_sqla.Channel):
    def _engine_from_config(self) -> Any:
        conninfo = self.connection.client
        options = {k: v for k, v in conninfo.transport_options.items()
                   if k not in _NOT_ENGINE_OPTIONS}
        url = conninfo.transport_options.get(URL_OPTION) or conninfo.hostname
        return create_engine(url, **options)


class Transport(kombu_sqla.Transport):
    Channel = Channel


def transport_settings(broker_url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Celery settings that route a ``sqla+`` URL through this transport (else none).

    ``options`` are the transport options so far; the result's include them.
    """
    if not broker_url.startswith(SQLA_PREFIX):
        return {}
    db_url = broker_url[len(SQLA_PREFIX):]
    url = make_url(db_url)
    shown = url.set(drivername=url.get_backend_name()).render_as_string(hide_password=False)
    return {"broker_url": shown, "broker_transport": TRANSPORT_PATH,
            "broker_transport_options": {**options, URL_OPTION: db_url}}
