"""One assembly of the outbox and its Celery relay, for every framework integration.

Flask (``ROCKETBOX_<NAME>``), Django (``settings.ROCKETBOX['<NAME>']``) and
FastAPI (``Rocketbox(<name>=...)``) take the same settings, the fields of
:class:`OutboxOptions`, and build from them the same two outboxes:

* ``base_outbox``: what the relay worker and the commands run with;
* ``outbox``: the same with ``on_commit`` wired to the Celery relay task when
  there is a Celery broker (``celery_broker`` ``None``: kombu's SQLAlchemy
  transport on the outbox's database, ``"sqla+"`` and its URL; ``""``: no
  Celery at all, run the sweeper yourself).

Celery is imported only when an app is made (:func:`with_celery`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from outbox.config import Mode, Outbox, RelaySettings
from outbox.serializers import JsonSerializer, Serializer
from outbox.targets.address import parse_broker_address
from outbox.validation import DEFAULT_MAX_BODY_SIZE

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["Assembly", "OutboxOptions", "assemble", "base_outbox", "with_celery"]


@dataclass(frozen=True, kw_only=True)
class OutboxOptions:
    """The settings every integration takes, by the same names (upper-case in Flask/Django)."""

    broker: str = "127.0.0.1:10911"
    producer_group: str = "rocketbox"
    mode: Mode = "outbox"
    serializer: Serializer | None = None
    relay: RelaySettings | None = None
    local_tx_timeout: float = 60.0
    access_key: str | None = None
    secret_key: str | None = None
    #: ``None``: the default (broker_lite's limit)
    max_body_size: int | None = None
    celery_broker: str | None = None
    celery_backend: str | None = None
    #: :class:`outbox.celery.CelerySettings` (``None``: its defaults)
    celery_settings: Any = None


@dataclass(frozen=True)
class Assembly:
    """The outbox views publish to, the one the relay runs with, and the Celery side."""

    outbox: Outbox
    base_outbox: Outbox
    celery: Celery | None
    #: the Celery broker URL in use; ``None`` when there is no Celery
    celery_broker: str | None


def base_outbox(engine: Engine, options: OutboxOptions, *,
                setting: Callable[[str], str] = str.lower) -> Outbox:
    """The outbox without ``on_commit``. ``setting("BROKER")`` names a setting in errors
    the way the framework spells it (``ROCKETBOX_BROKER``, ``ROCKETBOX['BROKER']``)."""
    broker = str(parse_broker_address(options.broker, setting=setting("BROKER")))
    return Outbox(engine=engine, broker=broker, producer_group=options.producer_group,
                  serializer=options.serializer or JsonSerializer(),
                  relay=options.relay or RelaySettings(), mode=options.mode,
                  local_tx_timeout=float(options.local_tx_timeout),
                  access_key=options.access_key, secret_key=options.secret_key,
                  max_body_size=(DEFAULT_MAX_BODY_SIZE if options.max_body_size is None
                                 else int(options.max_body_size)))


def with_celery(base: Outbox, options: OutboxOptions) -> Assembly:
    """``base`` and, unless ``celery_broker`` is ``""``, its Celery app and hooked outbox."""
    celery_broker = options.celery_broker
    if celery_broker == "":
        return Assembly(outbox=base, base_outbox=base, celery=None, celery_broker=None)
    from outbox.celery import celery_on_commit, make_celery  # Celery loads only here
    from outbox.celery.sqla import SQLA_PREFIX

    if celery_broker is None:
        celery_broker = SQLA_PREFIX + base.engine.url.render_as_string(hide_password=False)

    celery = make_celery(base, broker_url=celery_broker, backend_url=options.celery_backend,
                         settings=options.celery_settings)
    return Assembly(outbox=dataclasses.replace(base, on_commit=celery_on_commit(celery)),
                    base_outbox=base, celery=celery, celery_broker=celery_broker)


def assemble(engine: Engine, options: OutboxOptions, *,
             setting: Callable[[str], str] = str.lower) -> Assembly:
    """:func:`base_outbox` then :func:`with_celery`."""
    return with_celery(base_outbox(engine, options, setting=setting), options)
