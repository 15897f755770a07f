"""``settings.ROCKETBOX``: what it may say, and the outbox and Celery app built from it.

=========================== ===================================================== ==========
key                         meaning                                               default
=========================== ===================================================== ==========
``DATABASE``                the alias views write to (``using=`` overrides it)    "default"
``DATABASE_URL``            SQLAlchemy URL for the relay (else from DATABASES)    derived
``BROKER``                  ``HOST:PORT`` (broker_lite) or ``rocketmq://...``      127.0.0.1:10911
``PRODUCER_GROUP``          the outbox's producer group                           "rocketbox"
``MODE``                    ``"outbox"`` or ``"half_first"``                       "outbox"
``ROLLBACK_ON_ERROR_STATUS`` a 4xx/5xx response rolls back                        True
``SERIALIZER``              object with ``dumps`` (JSON by default)               JSON
``RELAY``                   :class:`~outbox.config.RelaySettings`                  defaults
``LOCAL_TX_TIMEOUT``        seconds before a rowless half is rolled back           60
``CELERY_BROKER``           Celery broker URL; None: ``sqla+`` the DB URL;        None
                            "": no Celery (run the sweeper yourself)
``CELERY_BACKEND``          Celery result backend                                 None
``CELERY_SETTINGS``         :class:`~outbox.celery.CelerySettings`                 defaults
``ACCESS_KEY``/``SECRET_KEY`` broker ACL credentials                              None
``MAX_BODY_SIZE``           largest body publish() takes (the broker's limit)     4 MiB
=========================== ===================================================== ==========
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.signals import setting_changed

from integrations._assembly import OutboxOptions, assemble
from integrations.django.db import forget_engines, sqlalchemy_url
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.migrate import engine_for
from outbox.targets import ProcessPublishers, Publisher
from outbox.targets.choose import publisher_for

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["DEFAULTS", "DjangoState", "options", "reset", "startup_checks", "state"]

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "DATABASE_URL": None,
    "BROKER": "127.0.0.1:10911",
    "PRODUCER_GROUP": "rocketbox",
    "MODE": "outbox",
    "ROLLBACK_ON_ERROR_STATUS": True,
    "SERIALIZER": None,
    "RELAY": None,
    "LOCAL_TX_TIMEOUT": 60.0,
    "CELERY_BROKER": None,
    "CELERY_BACKEND": None,
    "CELERY_SETTINGS": None,
    "ACCESS_KEY": None,
    "SECRET_KEY": None,
    "MAX_BODY_SIZE": None,
}


def options() -> dict[str, Any]:
    """``settings.ROCKETBOX`` over the defaults; unknown keys are an error."""
    given = getattr(settings, "ROCKETBOX", None) or {}
    if not isinstance(given, dict):
        raise ConfigurationError("settings.ROCKETBOX must be a dict")
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigurationError(f"settings.ROCKETBOX: unknown key(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(DEFAULTS))}")
    return {**DEFAULTS, **given}


@dataclass
class DjangoState:
    """The outbox (with the relay hook), the Celery app and the half-first publishers."""

    outbox: Outbox
    base_outbox: Outbox
    celery: Celery | None
    celery_broker: str | None
    options: dict[str, Any]
    _publishers: ProcessPublishers = field(init=False)

    def __post_init__(self) -> None:
        self._publishers = ProcessPublishers(lambda: publisher_for(self.outbox))

    def publisher(self) -> Publisher:
        return self._publishers.get()

    def close(self) -> None:
        self._publishers.close()
        self.outbox.engine.dispose()


_state: DjangoState | None = None
_state_lock = threading.Lock()


def _build() -> DjangoState:
    opts = options()
    url = opts["DATABASE_URL"] or sqlalchemy_url(opts["DATABASE"])
    engine = engine_for(url)
    built = assemble(engine, OutboxOptions(**{f.name: opts[f.name.upper()]
                                              for f in dataclasses.fields(OutboxOptions)}),
                     setting=lambda name: f"ROCKETBOX['{name}']")
    return DjangoState(outbox=built.outbox, base_outbox=built.base_outbox, celery=built.celery,
                       celery_broker=built.celery_broker, options=opts)


def startup_checks(command: str, outbox: Any) -> None:
    """The ``rocketbox_relay``/``rocketbox_checker`` start-up checks: the outbox's database
    (reachable, migrated: named as ``DATABASES[alias]``, or ``ROCKETBOX['DATABASE_URL']``
    when that is set) and the broker (:func:`outbox.cli_commands.startup_checks`)."""
    from outbox.cli_commands import startup_checks as check  # the commands' imports, on use

    opts = options()
    setting = ("ROCKETBOX['DATABASE_URL']" if opts["DATABASE_URL"]
               else f"DATABASES[{opts['DATABASE']!r}]")
    check(command, outbox, db_setting=setting, migrate_with="manage.py migrate rocketbox")


def state() -> DjangoState:
    """The process's :class:`DjangoState`, built from the settings on first use."""
    global _state
    with _state_lock:
        if _state is None:
            _state = _build()
        return _state


def reset(**_kwargs: Any) -> None:
    """Forget the state (``setting_changed`` for ROCKETBOX or DATABASES)."""
    global _state
    with _state_lock:
        old, _state = _state, None
    forget_engines()
    if old is not None:
        old.close()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("ROCKETBOX", "DATABASES"):
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="rocketbox-settings")
