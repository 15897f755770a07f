"""The three shops refuse bad input with 400/413/422 and a JSON error naming the field, never
a 500, never echoing a huge value, never writing a row; the owner's order still goes through.

Each shop runs as its README starts it (``migrate``, then its web part on port 0), on its
embedded SQLite default, and is attacked over real HTTP.
"""

from __future__ import annotations

import contextlib
import http.client as httplib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.examples.examples_support import example_env, run, running

PY = sys.executable
BIG = 5 * 1024 * 1024

#: (name, raw body, status, the field the error names) for every shop; ``None``: the body
NOT_JSON = b"item=tea&qty=2"
ATTACKS: list[tuple[str, bytes, int, str | None]] = [
    ("qty zero", b'{"item": "tea", "qty": 0}', 422, "qty"),
    ("qty negative", b'{"item": "tea", "qty": -3}', 422, "qty"),
    ("qty fraction", b'{"item": "tea", "qty": 1.5}', 422, "qty"),
    ("qty text", b'{"item": "tea", "qty": "two"}', 422, "qty"),
    ("qty boolean", b'{"item": "tea", "qty": true}', 422, "qty"),
    ("qty huge", b'{"item": "tea", "qty": 100000000000000000000000}', 422, "qty"),
    ("item missing", b'{"qty": 2}', 422, "item"),
    ("item a number", b'{"item": 7}', 422, "item"),
    ("item empty", b'{"item": ""}', 422, "item"),
    ("item too long", json.dumps({"item": "x" * 65}).encode(), 422, "item"),
    ("ref empty", b'{"item": "tea", "ref": ""}', 422, "ref"),
    ("a JSON array", b'[{"item": "tea", "qty": 1}]', 422, None),
    ("a JSON string", b'"tea"', 422, None),
    ("5 MiB item", json.dumps({"item": "x" * BIG}).encode(), 413, None),
    ("6 MiB body", b'{"item": "tea", "pad": "' + b"y" * (6 * 1024 * 1024) + b'"}', 413, None),
]


def post_raw(address: str, body: bytes) -> tuple[int, str, bytes]:
    """POST ``body`` as JSON; the status, the content type and the raw answer. A server may
    answer 413 before it reads a large body and close: the answer still counts."""
    host, port = address.rsplit(":", 1)
    conn = httplib.HTTPConnection(host, int(port), timeout=60)
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request("POST", "/orders", body=body,
                         headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


def _counts(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return (int(conn.execute(text("SELECT count(*) FROM shop_order")).scalar_one())
                    if engine.dialect.has_table(conn, "shop_order") else
                    int(conn.execute(text("SELECT count(*) FROM orders_order")).scalar_one()),
                    int(conn.execute(text("SELECT count(*) FROM rocketbox_transaction"))
                        .scalar_one()))
    finally:
        engine.dispose()


@contextlib.contextmanager
def _shop(name: str, tmp: Path) -> Iterator[tuple[str, str]]:
    """The shop's web part on its migrated embedded default: (HOST:PORT, its database URL)."""
    env = example_env(SHOP_BROKER="127.0.0.1:10911", SHOP_CELERY_BROKER="sqla+sqlite:///"
                      + str(tmp / "celery.sqlite"))
    if name == "django":
        manage = [PY, "-m", "examples.django_shop.manage"]
        run([*manage, "migrate", "--verbosity", "0"], env, tmp)
        web = [*manage, "serve", "--port", "0"]
        db = f"sqlite:///{tmp / 'var' / 'shop.sqlite'}"
    else:
        module = f"examples.{name}_shop.run"
        run([PY, "-m", module, "migrate"], env, tmp)
        web = [PY, "-m", module, "web", "--port", "0"]
        db = f"sqlite:///{tmp / ('var/shop.sqlite' if name == 'flask' else 'shop.sqlite')}"
    with running("web", web, env, tmp, r"shop ready http://\S+") as part:
        yield part.wait_for(r"shop ready http://(\S+)", 60).group(1), db


@pytest.mark.parametrize("shop", ["flask", "django", "fastapi"])
@pytest.mark.timeout(240)
def test_bad_orders_are_refused_with_a_json_error(shop: str, tmp_path: Path) -> None:
    with _shop(shop, tmp_path) as (address, db):
        attacks = [*ATTACKS, ("not JSON", NOT_JSON, 422 if shop == "fastapi" else 400, None)]
        for name, body, status, field in attacks:
            got, content_type, raw = post_raw(address, body)
            assert (got, content_type.split(";")[0]) == (status, "application/json"), \
                (name, got, raw[:300])
            answer: dict[str, Any] = json.loads(raw)
            assert isinstance(answer.get("error"), str) and answer["error"], (name, answer)
            if field is not None:
                assert answer.get("field") == field, (name, answer)
            assert len(raw) < 1024, (name, len(raw))  # the value is never echoed back
        assert _counts(db) == (0, 0)  # nothing written, nothing to relay
        # the owner's orders still go through, and a taken ref is a 409, not a 500
        status, _, raw = post_raw(address, b'{"item": "tea", "qty": 2, "ref": "mine-1"}')
        assert status == 201, raw[:300]
        assert json.loads(raw)["price"] == 5.0
        status, _, raw = post_raw(address, b'{"item": "tea", "qty": 1, "ref": "mine-1"}')
        assert status == 409 and json.loads(raw)["field"] == "ref", raw[:300]
        status, _, raw = post_raw(address, b'{"item": "tea", "qty": 11}')
        assert status == 409 and "at most 10" in json.loads(raw)["error"], raw[:300]
        assert _counts(db) == (1, 1)
