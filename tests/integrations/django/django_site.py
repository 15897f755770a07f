"""The Django site the integration tests serve: settings, views and URLs.

Django is configured here, once per process (pytest-django is not used):
``default`` and ``orders`` are SQLite files (``orders`` with
``ATOMIC_REQUESTS``); PostgreSQL tests add a ``pg`` alias on a fresh
database. Test modules import this one before anything of Django's.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import django
from django.conf import settings

_TMP = Path(tempfile.mkdtemp(prefix="rocketbox-django-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)  # settings live as long as the process
if not settings.configured:
    settings.configure(
        DEBUG=False, SECRET_KEY="rocketbox-tests", ALLOWED_HOSTS=["*"], USE_TZ=True,
        ROOT_URLCONF="tests.integrations.django.django_site", MIDDLEWARE=[],
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "django.contrib.sessions", "django.contrib.messages",
                        "django.contrib.admin", "integrations.django"],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3",
                        "NAME": str(_TMP / "default.sqlite"),
                        "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
            "orders": {"ENGINE": "django.db.backends.sqlite3",
                       "NAME": str(_TMP / "orders.sqlite"), "ATOMIC_REQUESTS": True,
                       "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
        },
        ROCKETBOX={"CELERY_BROKER": ""},
    )
    django.setup()

from asgiref.sync import sync_to_async  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.http import HttpRequest, HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views import View  # noqa: E402

from integrations.django import (  # noqa: E402
    TransactionalMessageMixin,
    apublish,
    publish,
    transactional_message,
)
from integrations.django.conf import state  # noqa: E402

TOPIC = "DjangoOrders"


def _insert(alias: str, order_id: int, item: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("INSERT INTO orders (id, item) VALUES (%s, %s)", [order_id, item])


def _order_view(alias: str | None) -> Any:
    @transactional_message(topic=TOPIC, tag="OrderCreated", using=alias,
                           body=lambda response: json.loads(response.content),
                           keys=lambda response: str(json.loads(response.content)["id"]))
    def view(request: HttpRequest) -> HttpResponse:
        payload = json.loads(request.body)
        _insert(alias or str(state().options["DATABASE"]), payload["id"], payload["item"])
        if payload.get("explode"):
            raise RuntimeError("boom")
        if payload.get("reject"):
            return JsonResponse({"error": "rejected"}, status=422)
        return JsonResponse({"id": payload["id"], "item": payload["item"]}, status=201)

    return view


@transactional_message(topic=TOPIC, tag="Line")
def batch(request: HttpRequest) -> HttpResponse:
    ids = [publish(None, {"line": i}, keys=f"line-{i}") for i in range(3)]
    return JsonResponse({"tx_ids": ids})


@transactional_message(topic=TOPIC, tag="Half", mode="half_first",
                       body=lambda response: json.loads(response.content))
def half(request: HttpRequest) -> HttpResponse:
    payload = json.loads(request.body)
    _insert(str(state().options["DATABASE"]), payload["id"], "half")
    if payload.get("explode"):
        raise RuntimeError("boom")
    return JsonResponse({"id": payload["id"]})


@transactional_message(topic=TOPIC, tag="HalfPg", mode="half_first", using="pg",
                       body=lambda response: json.loads(response.content))
def half_on_pg(request: HttpRequest) -> HttpResponse:
    payload = json.loads(request.body)
    _insert("pg", payload["id"], "half")
    return JsonResponse({"id": payload["id"]})


class ClassOrder(TransactionalMessageMixin, View):
    rocketbox_topic = TOPIC
    rocketbox_tag = "ClassBased"

    def post(self, request: HttpRequest) -> HttpResponse:
        payload = json.loads(request.body)
        _insert(str(state().options["DATABASE"]), payload["id"], "cbv")
        publish(None, {"id": payload["id"]})
        return JsonResponse({"id": payload["id"]}, status=201)


def outside(request: HttpRequest) -> HttpResponse:
    try:
        publish(TOPIC, {"x": 1})
    except Exception as exc:
        return JsonResponse({"error": str(exc)})
    return JsonResponse({"error": ""})


@transaction.non_atomic_requests(using="orders")  # Django: no ATOMIC_REQUESTS on async views
@transactional_message(topic=TOPIC, tag="Async",
                       body=lambda response: json.loads(response.content))
async def async_order(request: HttpRequest) -> HttpResponse:
    """An async view: async ORM-style work through the connection, and apublish()."""
    payload = json.loads(request.body)
    await sync_to_async(_insert)(str(state().options["DATABASE"]), payload["id"], "async")
    for line in range(int(payload.get("lines", 0))):
        await apublish(None, {"id": payload["id"], "line": line}, tag="Line")
    if payload.get("explode"):
        raise RuntimeError("boom")
    if payload.get("reject"):
        return JsonResponse({"error": "rejected"}, status=422)
    return JsonResponse({"id": payload["id"]}, status=201)


urlpatterns = [
    path("async-orders", async_order),
    path("orders", _order_view(None)),
    path("orders-on/orders", _order_view("orders")),
    path("orders-on/pg", _order_view("pg")),
    path("batch", batch),
    path("half", half),
    path("half-on/pg", half_on_pg),
    path("class-orders", ClassOrder.as_view()),
    path("outside", outside),
]
