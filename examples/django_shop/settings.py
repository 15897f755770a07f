"""The Django shop's settings; the environment picks the databases and brokers.

``SHOP_DB`` (default: ``var/shop.sqlite`` under the current directory),
``SHOP_INVENTORY_DB`` (``var/inventory.sqlite``), ``SHOP_BROKER``
(``127.0.0.1:10911``), ``SHOP_CELERY_BROKER`` (``sqla+sqlite:///`` +
``var/celery.sqlite``; Redis in production). ``SHOP_VAR`` moves the ``var``
working folder (it is created on first use).

SQLite is shared with the relay, which writes the same file: the database
runs in ``IMMEDIATE`` transaction mode (a request takes the write lock when
its transaction starts, so it waits for a relay sweep instead of failing
with ``database is locked``); rocketbox adds WAL and a busy timeout.
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
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database,
                "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30}}
    return {"ENGINE": "django.db.backends.postgresql", "NAME": parsed.database,
            "USER": parsed.username or "", "PASSWORD": parsed.password or "",
            "HOST": parsed.host or "", "PORT": str(parsed.port or "")}


HERE = Path(os.environ.get("SHOP_VAR") or Path.cwd() / "var").resolve()
HERE.mkdir(parents=True, exist_ok=True)
SHOP_DB = os.environ.get("SHOP_DB") or f"sqlite:///{HERE / 'shop.sqlite'}"
INVENTORY_DB = os.environ.get("SHOP_INVENTORY_DB") or f"sqlite:///{HERE / 'inventory.sqlite'}"

SECRET_KEY = "django-shop-example-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "examples.django_shop.urls"
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages",
    "integrations.django", "examples.django_shop.orders",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "examples.django_shop.orders.views.ShopErrors",  # the shop's errors as JSON
]
#: an order is a few dozen bytes: a larger body is refused (413) before it is read
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
STATIC_URL = "static/"
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
