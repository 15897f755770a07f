"""The outbox admin with Django's test client on a real SQLite database (no mocks).

Settings come from ``django_site`` (Django is configured once per
process); the admin's URLs, middleware and templates are switched on here
with ``override_settings``.
"""

from __future__ import annotations

# configures Django before the imports below
from tests.integrations.django import django_site  # noqa: F401

# isort: split

import html
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connections, transaction
from django.test import Client
from django.test.utils import override_settings
from django.urls import path
from sqlalchemy import update

from integrations.django.admin import body_text, pending_age
from integrations.django.conf import reset, state
from integrations.django.db import sqlalchemy_connection
from outbox import publish
from outbox.models import transaction_table as t

urlpatterns = [path("admin/", admin.site.urls)]

ADMIN_SETTINGS = {
    "ROOT_URLCONF": __name__,
    "MIDDLEWARE": ["django.contrib.sessions.middleware.SessionMiddleware",
                   "django.middleware.csrf.CsrfViewMiddleware",
                   "django.contrib.auth.middleware.AuthenticationMiddleware",
                   "django.contrib.messages.middleware.MessageMiddleware"],
    "TEMPLATES": [{"BACKEND": "django.template.backends.django.DjangoTemplates",
                   "APP_DIRS": True,
                   "OPTIONS": {"context_processors": [
                       "django.template.context_processors.request",
                       "django.contrib.auth.context_processors.auth",
                       "django.contrib.messages.context_processors.messages"]}}],
    "TIME_ZONE": "UTC",
    "ROCKETBOX": {"CELERY_BROKER": ""},
}
CHANGELIST = "/admin/rocketbox/outboxmessage/"


@pytest.fixture
def rows() -> Iterator[dict[str, str]]:
    """A migrated default DB: a pending row (3 attempts, an error), a relayed and a parked one."""
    with override_settings(**ADMIN_SETTINGS):
        call_command("migrate", database="default", verbosity=0)
        with connections["default"].cursor() as cursor:
            cursor.execute("DELETE FROM rocketbox_transaction")
        outbox = state().base_outbox
        made = {}
        with transaction.atomic(), sqlalchemy_connection() as conn:
            for name in ("pending", "relayed", "parked"):
                made[name] = publish(conn, "Orders", {"order": name, "qty": 2, "ünï": "çödé"},
                                     outbox=outbox, tag="OrderCreated")
            an_hour_ago = datetime.now(UTC) - timedelta(hours=1, minutes=2)
            conn.execute(update(t).where(t.c.tx_id == made["pending"]).values(
                attempts=3, last_error="broker unreachable: connection refused",
                created_at=an_hour_ago))
            conn.execute(update(t).where(t.c.tx_id == made["relayed"]).values(
                relayed_at=datetime.now(UTC)))
            conn.execute(update(t).where(t.c.tx_id == made["parked"]).values(
                parked=True, attempts=10, last_error="no PUB permission on topic"))
        yield made
    reset()
    connections.close_all()


@pytest.fixture
def client(rows: dict[str, str]) -> Iterator[Client]:
    with override_settings(**ADMIN_SETTINGS):
        user = User.objects.filter(username="admin").first() or User.objects.create_superuser(
            "admin", "admin@example.com", "not-secret")
        client = Client()
        client.force_login(user)
        yield client


@pytest.mark.timeout(60)
def test_changelist_shows_attempts_pending_age_and_last_error(
        client: Client, rows: dict[str, str]) -> None:
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    for column in ("attempts", "pending for", "last error"):
        assert f">{column.capitalize()}<" in page or f">{column}<" in page, column
    assert "broker unreachable: connection refused" in page
    assert "1h 02m" in page  # the pending row's age
    assert all(tx_id in page for tx_id in rows.values())


@pytest.mark.timeout(60)
def test_delivery_filter_picks_pending_parked_and_relayed_rows(
        client: Client, rows: dict[str, str]) -> None:
    for value in ("pending", "parked", "relayed"):
        response = client.get(CHANGELIST, {"delivery": value})
        assert response.status_code == 200
        page = response.content.decode()
        shown = {name for name, tx_id in rows.items() if tx_id in page}
        assert shown == {value}, (value, shown)


@pytest.mark.timeout(60)
def test_change_view_shows_the_body_as_json_text(client: Client, rows: dict[str, str]) -> None:
    response = client.get(f"{CHANGELIST}{rows['pending']}/change/")
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert '"order": "pending"' in page and '"ünï": "çödé"' in page
    assert "b'" not in page and 'b"' not in page  # no Python bytes literal
    assert "broker unreachable: connection refused" in page


def test_body_text_and_pending_age_for_each_kind_of_value() -> None:
    assert body_text(b'{"b": 1, "a": [1, 2]}') == json.dumps({"a": [1, 2], "b": 1}, indent=2)
    assert body_text(memoryview(b"plain text")) == "plain text"
    assert body_text(b"\xff\x00") == "ff 00"
    assert body_text(None) == ""
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert pending_age(now - timedelta(seconds=7), None, now) == "7s"
    assert pending_age(now - timedelta(minutes=3, seconds=5), None, now) == "3m 05s"
    assert pending_age(now - timedelta(days=2, hours=4), None, now) == "2d 04h"
    assert pending_age((now - timedelta(hours=1)).replace(tzinfo=None), None, now) == "1h 00m"
    assert pending_age(now, now, now) == ""


@pytest.mark.timeout(30)
def test_djangos_sqlite_connections_use_wal_and_a_busy_timeout() -> None:
    connections["default"].close()
    with connections["default"].cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone() == ("wal",)
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone() == (30_000,)


@pytest.mark.timeout(30)
def test_sqlite_without_immediate_transactions_is_warned_about() -> None:
    settings_dict = connections["default"].settings_dict
    options = settings_dict["OPTIONS"]
    settings_dict["OPTIONS"] = {}
    try:
        ids = {message.id for message in run_checks(tags=["rocketbox"])}
    finally:
        settings_dict["OPTIONS"] = options
    assert "rocketbox.W002" in ids
    assert "rocketbox.W002" not in {m.id for m in run_checks(tags=["rocketbox"])}
