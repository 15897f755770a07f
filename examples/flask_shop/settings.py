"""The shop's configuration, from the environment (an application edge may read it).

=====================  ==============================  ===============================
variable               meaning                         default
=====================  ==============================  ===============================
``SHOP_DB``            the shop's database             ``var/shop.sqlite``
``SHOP_BROKER``        broker_lite's native address    ``127.0.0.1:10911``
``SHOP_CELERY_BROKER`` the relay tasks' Celery broker  ``var/celery.sqlite``
``SHOP_CELERY_BACKEND`` Celery results (optional)      none
``SHOP_INVENTORY_DB``  the inventory's database        ``var/inventory.sqlite``
``SHOP_VAR``           the working folder of the files  ``var`` in the current directory
``SHOP_ACCESS_KEY``    broker ACL account (``--acl``)  none (no ACL)
``SHOP_SECRET_KEY``    its secret                      none
``SHOP_INVENTORY_ACCESS_KEY``  the inventory consumer's  ``SHOP_ACCESS_KEY``
                       account, and
``SHOP_INVENTORY_SECRET_KEY``  its secret              ``SHOP_SECRET_KEY``
=====================  ==============================  ===============================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from examples.flask_shop.commands import shop_broker
from outbox import RelaySettings
from outbox.celery import CelerySettings


def _here(name: str, env: dict[str, str]) -> str:
    """A SQLite file in the working folder (created), as an absolute path.

    (Flask-SQLAlchemy would put a relative one in the app's instance folder.)
    """
    folder = Path(env.get("SHOP_VAR") or Path.cwd() / "var").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / name}"


def shop_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The Flask config of the shop."""
    env = dict(os.environ if env is None else env)
    db = env.get("SHOP_DB") or _here("shop.sqlite", env)
    options: dict[str, Any] = {}
    if db.startswith("sqlite"):
        options["connect_args"] = {"timeout": 30}
    return {
        "SQLALCHEMY_DATABASE_URI": db,
        "SQLALCHEMY_ENGINE_OPTIONS": options,
        "ROCKETBOX_BROKER": shop_broker(env),
        "ROCKETBOX_PRODUCER_GROUP": "shop",
        "ROCKETBOX_ACCESS_KEY": env.get("SHOP_ACCESS_KEY") or None,
        "ROCKETBOX_SECRET_KEY": env.get("SHOP_SECRET_KEY") or None,
        "ROCKETBOX_CELERY_BROKER": (env.get("SHOP_CELERY_BROKER")
                                    or "sqla+" + _here("celery.sqlite", env)),
        "ROCKETBOX_CELERY_BACKEND": env.get("SHOP_CELERY_BACKEND") or None,
        "ROCKETBOX_CELERY_SETTINGS": CelerySettings(polling_interval=0.05, sweep_interval=1.0),
        "ROCKETBOX_RELAY": RelaySettings(lease_seconds=3.0, broker_timeout=2.0,
                                         backoff_base=0.1, backoff_max=2.0),
    }


def inventory_keys(env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """The inventory consumer's broker account: its own, else the shop's, else none."""
    env = dict(os.environ if env is None else env)
    return (env.get("SHOP_INVENTORY_ACCESS_KEY") or env.get("SHOP_ACCESS_KEY") or None,
            env.get("SHOP_INVENTORY_SECRET_KEY") or env.get("SHOP_SECRET_KEY") or None)


def inventory_db(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env)
    return env.get("SHOP_INVENTORY_DB") or _here("inventory.sqlite", env)
