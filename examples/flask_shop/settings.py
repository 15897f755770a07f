"""The shop's configuration, from the environment (an application edge may read it).

=====================  ==============================  ===============================
variable               meaning                         default
=====================  ==============================  ===============================
``SHOP_DB``            the shop's database             ``sqlite:///shop.sqlite``
``SHOP_BROKER``        broker_lite's native address    ``127.0.0.1:10911``
``SHOP_CELERY_BROKER`` the relay tasks' Celery broker  ``sqla+sqlite:///celery.sqlite``
``SHOP_CELERY_BACKEND`` Celery results (optional)      none
``SHOP_INVENTORY_DB``  the inventory's database        ``sqlite:///inventory.sqlite``
=====================  ==============================  ===============================
"""

from __future__ import annotations

import os
from typing import Any

from outbox import RelaySettings
from outbox.celery import CelerySettings


def shop_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The Flask config of the shop."""
    env = dict(os.environ if env is None else env)
    db = env.get("SHOP_DB", "sqlite:///shop.sqlite")
    options: dict[str, Any] = {}
    if db.startswith("sqlite"):
        options["connect_args"] = {"timeout": 30}
    return {
        "SQLALCHEMY_DATABASE_URI": db,
        "SQLALCHEMY_ENGINE_OPTIONS": options,
        "ROCKETBOX_BROKER": env.get("SHOP_BROKER", "127.0.0.1:10911"),
        "ROCKETBOX_PRODUCER_GROUP": "shop",
        "ROCKETBOX_CELERY_BROKER": env.get("SHOP_CELERY_BROKER",
                                           "sqla+sqlite:///celery.sqlite"),
        "ROCKETBOX_CELERY_BACKEND": env.get("SHOP_CELERY_BACKEND") or None,
        "ROCKETBOX_CELERY_SETTINGS": CelerySettings(polling_interval=0.05, sweep_interval=1.0),
        "ROCKETBOX_RELAY": RelaySettings(lease_seconds=3.0, broker_timeout=2.0,
                                         backoff_base=0.1, backoff_max=2.0),
    }


def inventory_db(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    return env.get("SHOP_INVENTORY_DB", "sqlite:///inventory.sqlite")
