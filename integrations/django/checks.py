"""System checks (``manage.py check``) for ``settings.ROCKETBOX``.

* ``rocketbox.E001``: the broker address is missing or not one
  :func:`~outbox.targets.address.parse_broker_address` takes;
* ``rocketbox.E002``: the outbox's database does not support transactions,
  or is not one rocketbox supports (PostgreSQL, SQLite);
* ``rocketbox.E003``: ``settings.ROCKETBOX`` is not a dict, has unknown keys,
  or a bad ``MODE``;
* ``rocketbox.W001``: no Celery broker (``CELERY_BROKER=""``): nothing
  enqueues the relay after a commit; run the sweeper yourself;
* ``rocketbox.W002``: the outbox's database is SQLite without
  ``OPTIONS["transaction_mode"] = "IMMEDIATE"``: a request that reads and
  then writes (an admin login under ``ATOMIC_REQUESTS``) fails with
  ``database is locked`` when the relay writes at that moment, instead of
  waiting (see :mod:`outbox.sqlite`).
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import connections

from outbox.errors import ConfigurationError
from outbox.targets.address import BrokerAddressError, parse_broker_address

__all__ = ["check_rocketbox", "register"]


def check_rocketbox(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from integrations.django.conf import options
    from integrations.django.db import sqlalchemy_url

    try:
        opts = options()
    except ConfigurationError as exc:
        return [checks.Error(str(exc), id="rocketbox.E003")]
    problems: list[checks.CheckMessage] = []
    try:
        parse_broker_address(opts["BROKER"], setting="ROCKETBOX['BROKER']")
    except BrokerAddressError as exc:
        problems.append(checks.Error(
            str(exc), hint="broker_lite's HOST:PORT, e.g. '127.0.0.1:10911', or "
                           "'rocketmq://proxy:8081' for Apache RocketMQ 5 (docs/rocketmq.md)",
            id="rocketbox.E001"))
    if opts["MODE"] not in ("outbox", "half_first"):
        problems.append(checks.Error(f"ROCKETBOX['MODE'] = {opts['MODE']!r}",
                                     hint="'outbox' or 'half_first'", id="rocketbox.E003"))
    alias = opts["DATABASE"]
    if alias not in connections:
        problems.append(checks.Error(f"ROCKETBOX['DATABASE'] = {alias!r} is not in DATABASES",
                                     id="rocketbox.E002"))
    else:
        try:
            sqlalchemy_url(alias)
        except ConfigurationError as exc:
            problems.append(checks.Error(str(exc), id="rocketbox.E002"))
        else:
            features = connections[alias].features
            if not features.supports_transactions:
                problems.append(checks.Error(
                    f"database {alias!r} does not support transactions",
                    hint="rocketbox writes messages in the view's transaction",
                    id="rocketbox.E002"))
            problems.extend(_sqlite_transaction_mode(alias))
    if opts["CELERY_BROKER"] == "":
        problems.append(checks.Warning(
            "ROCKETBOX['CELERY_BROKER'] is '': no relay task is enqueued after a commit",
            hint="set a Celery broker URL, or leave it unset for kombu's SQLAlchemy "
                 "transport on the database; otherwise only the sweeper relays",
            id="rocketbox.W001"))
    return problems


def _sqlite_transaction_mode(alias: str) -> list[checks.CheckMessage]:
    connection = connections[alias]
    if connection.vendor != "sqlite":
        return []
    mode = str(connection.settings_dict.get("OPTIONS", {}).get("transaction_mode") or "")
    if mode.upper() == "IMMEDIATE":
        return []
    return [checks.Warning(
        f"database {alias!r} is SQLite with transaction_mode {mode or 'DEFERRED'!r}: a "
        "request that reads, then writes, fails with 'database is locked' while the relay "
        "writes",
        hint=f"set DATABASES[{alias!r}]['OPTIONS'] = {{'transaction_mode': 'IMMEDIATE'}}",
        id="rocketbox.W002")]


def register() -> None:
    checks.register(check_rocketbox, "rocketbox")
