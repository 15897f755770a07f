"""examples/flask_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from examples_support import FLASK, example_env, http, run, running
from sqlalchemy import create_engine, text
from support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until

PY = sys.executable
SHOP = "examples.flask_shop.run"
APP = "examples.flask_shop.wsgi"


def _exercise(env: dict[str, str], tmp: Path, inventory_url: str) -> None:
    run([PY, "-m", SHOP, "migrate"], env, tmp)
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(running(
            "relay", [str(FLASK), "--app", APP, "rocketbox", "relay"], env, tmp, r"ready\."))
        stack.enter_context(running(
            "checker", [str(FLASK), "--app", APP, "rocketbox", "checker"], env, tmp,
            "rocketbox checker ready"))
        stack.enter_context(running("inventory", [PY, "-m", SHOP, "inventory"], env, tmp,
                                    "inventory ready"))
        web = stack.enter_context(running("web", [PY, "-m", SHOP, "web", "--port", "0"], env,
                                          tmp, r"shop ready http://\S+"))
        address = web.wait_for(r"shop ready http://(\S+)").group(1)
        created = []
        for i in range(6):
            status, body = http(address, "POST", "/orders", {"item": "tea", "qty": i + 1})
            assert status == 201, body
            created.append(body["ref"])
        assert http(address, "POST", "/orders", {"item": "unicorn", "ref": "bad-1"})[0] == 422
        assert http(address, "POST", "/orders", {"item": "tea", "qty": 50, "ref": "bad-2"})[0] \
            == 409
        assert http(address, "GET", "/orders/bad-1")[0] == 404
        inventory = create_engine(inventory_url)
        try:
            def reserved() -> list[str]:
                with inventory.connect() as conn:
                    return sorted(conn.execute(text(
                        "SELECT order_ref FROM inventory_reservation")).scalars())
            wait_until(lambda: reserved() == sorted(created), timeout=40,
                       message=lambda: f"reserved {reserved()}\n{relay.log()[-3000:]}")
        finally:
            inventory.dispose()
        status_json = json.loads(run([str(FLASK), "--app", APP, "rocketbox", "status",
                                      "--json"], env, tmp))
        wait_until(lambda: json.loads(run([str(FLASK), "--app", APP, "rocketbox", "status",
                                           "--json"], env, tmp))["totals"]["pending"] == 0,
                   timeout=30)
        assert status_json["totals"]["parked"] == 0


@pytest.mark.timeout(300)
def test_flask_shop_on_the_embedded_default(broker_lite_server: BrokerLiteServer,
                                            tmp_path: Path) -> None:
    env = example_env(SHOP_BROKER=broker_lite_server.native)  # README defaults otherwise
    _exercise(env, tmp_path, f"sqlite:///{tmp_path / 'var' / 'inventory.sqlite'}")
    var = tmp_path / "var"  # the README's working folder, not the current directory
    assert (var / "shop.sqlite").exists() and (var / "celery.sqlite").exists()
    assert not list(tmp_path.glob("*.sqlite"))


@pytest.mark.timeout(300)
def test_flask_shop_on_postgres_and_redis(postgres_server: PostgresServer, redis_url: str,
                                          tmp_path: Path) -> None:
    shop = postgres_server.create_database("flask_shop")
    inventory = postgres_server.create_database("flask_inventory")
    with start_broker_lite(tmp_path / "broker", ("--tx-timeout", "1")) as broker:
        env = example_env(SHOP_DB=shop.url, SHOP_INVENTORY_DB=inventory.url,
                          SHOP_CELERY_BROKER=redis_url, SHOP_BROKER=broker.native)
        _exercise(env, tmp_path, inventory.url)
