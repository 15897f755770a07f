"""The shop's configuration, from the environment (an application edge may read it).

=====================  ================================  ===============================
variable               meaning                           default
=====================  ================================  ===============================
``SHOP_DB``            the shop's database (async URL)   ``shop.sqlite`` here (aiosqlite)
``SHOP_BROKER``        broker_lite's native address      ``127.0.0.1:10911``
``SHOP_CELERY_BROKER`` the relay tasks' Celery broker    ``celery.sqlite`` here
``SHOP_INVENTORY_DB``  the inventory's database (sync)   ``inventory.sqlite`` here
=====================  ================================  ===============================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from examples.flask_shop.commands import shop_broker
from outbox import RelaySettings
from outbox.celery import CelerySettings


def _here(name: str, driver: str = "sqlite") -> str:
    return f"{driver}:///{Path.cwd() / name}"


def shop_settings(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The keywords of the shop's :class:`integrations.fastapi.Rocketbox`."""
    env = dict(os.environ if env is None else env)
    db = env.get("SHOP_DB") or _here("shop.sqlite", "sqlite+aiosqlite")
    return {
        "database": db,
        "engine_options": {"connect_args": {"timeout": 30}} if db.startswith("sqlite") else {},
        "broker": shop_broker(env),
        "producer_group": "shop",
        "celery_broker": env.get("SHOP_CELERY_BROKER") or "sqla+" + _here("celery.sqlite"),
        "celery_settings": CelerySettings(polling_interval=0.05, sweep_interval=1.0),
        "relay": RelaySettings(lease_seconds=3.0, broker_timeout=2.0, backoff_base=0.1,
                               backoff_max=2.0),
    }


def inventory_db(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    return env.get("SHOP_INVENTORY_DB") or _here("inventory.sqlite")
