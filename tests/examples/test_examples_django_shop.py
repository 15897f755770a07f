"""examples/django_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from examples_support import example_env, http, run, running
from sqlalchemy import create_engine, text
from support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until

PY = sys.executable
MANAGE = [PY, "-m", "examples.django_shop.manage"]


def _post(address: str, payload: dict[str, Any]) -> tuple[int, Any]:
    return http(address, "POST", "/orders", payload)


def _exercise(env: dict[str, str], tmp: Path, inventory_url: str) -> None:
    run([*MANAGE, "migrate", "--verbosity", "0"], env, tmp)
    assert run([*MANAGE, "check"], env, tmp).strip().startswith("System check identified no")
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(running("relay", [*MANAGE, "rocketbox_relay"], env, tmp,
                                            r"ready\."))
        stack.enter_context(running("checker", [*MANAGE, "rocketbox_checker"], env, tmp,
                                    "rocketbox checker ready"))
        stack.enter_context(running("inventory", [*MANAGE, "inventory"], env, tmp,
                                    "inventory ready"))
        web = stack.enter_context(running("web", [*MANAGE, "serve", "--port", "0"], env, tmp,
                                          r"shop ready http://\S+"))
        address = web.wait_for(r"shop ready http://(\S+)").group(1)
        created = []
        for i in range(5):
            status, body = _post(address, {"item": "cake", "qty": i + 1})
            assert status == 201, body
            created.append(body["ref"])
        assert _post(address, {"item": "unicorn", "ref": "bad-1"})[0] == 422
        assert _post(address, {"item": "tea", "qty": 50, "ref": "bad-2"})[0] == 500
        inventory = create_engine(inventory_url)
        try:
            def reserved() -> list[str]:
                with inventory.connect() as conn:
                    return sorted(conn.execute(text(
                        "SELECT order_ref FROM inventory_reservation")).scalars())
            wait_until(lambda: reserved() == sorted(created), timeout=40,
                       ignore=(Exception,),
                       message=lambda: f"reserved {reserved()}\n{relay.log()[-3000:]}")
        finally:
            inventory.dispose()
        status_json = json.loads(run([*MANAGE, "rocketbox_status", "--json"], env, tmp))
        assert status_json["totals"]["parked"] == 0


@pytest.mark.timeout(150)
def test_django_shop_on_the_embedded_default(broker_lite_server: BrokerLiteServer,
                                             tmp_path: Path) -> None:
    env = example_env(SHOP_BROKER=broker_lite_server.native)
    _exercise(env, tmp_path, f"sqlite:///{tmp_path / 'inventory.sqlite'}")


@pytest.mark.timeout(150)
def test_django_shop_on_postgres_and_redis(postgres_server: PostgresServer, redis_url: str,
                                           tmp_path: Path) -> None:
    shop = postgres_server.create_database("django_shop")
    inventory = postgres_server.create_database("django_inventory")
    with start_broker_lite(tmp_path / "broker", ("--tx-timeout", "1")) as broker:
        env = example_env(SHOP_DB=shop.url, SHOP_INVENTORY_DB=inventory.url,
                          SHOP_CELERY_BROKER=redis_url, SHOP_BROKER=broker.native)
        _exercise(env, tmp_path, inventory.url)
