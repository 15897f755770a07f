"""The Django shop's settings; the environment picks the databases and brokers.

``SHOP_DB`` (default: ``shop.sqlite`` here), ``SHOP_INVENTORY_DB``
(``inventory.sqlite`` here), ``SHOP_BROKER`` (``127.0.0.1:10911``),
``SHOP_CELERY_BROKER`` (``sqla+sqlite:///celery.sqlite`` here; Redis in
production).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import make_url

from outbox import RelaySettings
from outbox.celery import CelerySettings


def _database(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}
    return {"ENGINE": "django.db.backends.postgresql", "NAME": parsed.database,
            "USER": parsed.username or "", "PASSWORD": parsed.password or "",
            "HOST": parsed.host or "", "PORT": str(parsed.port or "")}


HERE = Path.cwd()
SHOP_DB = os.environ.get("SHOP_DB") or f"sqlite:///{HERE / 'shop.sqlite'}"
INVENTORY_DB = os.environ.get("SHOP_INVENTORY_DB") or f"sqlite:///{HERE / 'inventory.sqlite'}"

SECRET_KEY = "django-shop-example-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "examples.django_shop.urls"
INSTALLED_APPS = ["integrations.django", "examples.django_shop.orders"]
MIDDLEWARE: list[str] = []
DATABASES = {"default": {**_database(SHOP_DB), "ATOMIC_REQUESTS": True}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROCKETBOX = {
    "BROKER": os.environ.get("SHOP_BROKER", "127.0.0.1:10911"),
    "PRODUCER_GROUP": "django-shop",
    "CELERY_BROKER": (os.environ.get("SHOP_CELERY_BROKER")
                      or f"sqla+sqlite:///{HERE / 'celery.sqlite'}"),
    "CELERY_SETTINGS": CelerySettings(polling_interval=0.05, sweep_interval=1.0),
    "RELAY": RelaySettings(lease_seconds=3.0, broker_timeout=2.0, backoff_base=0.1,
                           backoff_max=2.0),
}
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"console": {"class": "logging.StreamHandler"}},
           "root": {"handlers": ["console"], "level": "WARNING"}}
