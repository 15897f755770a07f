"""examples/fastapi_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis,
the web part under uvicorn, over real HTTP."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from examples_support import (
    READY_TIMEOUT,
    example_env,
    http,
    order_from_the_shop,
    run,
    running,
    wait_reserved,
)
from support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until

from integrations.fastapi import sync_url

PY = sys.executable
SHOP = "examples.fastapi_shop.run"


def _exercise(env: dict[str, str], tmp: Path, shop_sync_url: str, inventory_url: str) -> None:
    run([PY, "-m", SHOP, "migrate"], env, tmp)
    status = [PY, "-m", "outbox", "status", "--json", "--db", shop_sync_url]
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(running("relay", [PY, "-m", SHOP, "relay"], env, tmp,
                                            r"ready\."))
        stack.enter_context(running("checker", [PY, "-m", SHOP, "checker"], env, tmp,
                                    "checker ready"))
        stack.enter_context(running("inventory", [PY, "-m", SHOP, "inventory"], env, tmp,
                                    "inventory ready"))
        web = stack.enter_context(running("web", [PY, "-m", SHOP, "web", "--port", "0"], env,
                                          tmp, r"shop ready http://\S+"))
        address = web.wait_for(r"shop ready http://(\S+)", READY_TIMEOUT).group(1)
        created = order_from_the_shop(address)
        assert http(address, "GET", f"/orders/{created[0]}")[1]["qty"] == 1
        wait_reserved(inventory_url, created, relay)
        wait_until(lambda: json.loads(run(status, env, tmp))["totals"]["pending"] == 0,
                   timeout=30)
        assert json.loads(run(status, env, tmp))["totals"]["parked"] == 0


@pytest.mark.timeout(150)
def test_fastapi_shop_on_the_embedded_default(broker_lite_server: BrokerLiteServer,
                                              tmp_path: Path) -> None:
    env = example_env(SHOP_BROKER=broker_lite_server.native)  # README defaults otherwise
    _exercise(env, tmp_path, f"sqlite:///{tmp_path / 'shop.sqlite'}",
              f"sqlite:///{tmp_path / 'inventory.sqlite'}")
    assert (tmp_path / "celery.sqlite").exists()


@pytest.mark.timeout(150)
def test_fastapi_shop_on_postgres_asyncpg_and_redis(postgres_server: PostgresServer,
                                                    redis_url: str, tmp_path: Path) -> None:
    shop = postgres_server.create_database("fastapi_shop")
    inventory = postgres_server.create_database("fastapi_inventory")
    async_url = shop.url.replace("+psycopg:", "+asyncpg:")
    with start_broker_lite(tmp_path / "broker", ("--tx-timeout", "1")) as broker:
        env = example_env(SHOP_DB=async_url, SHOP_INVENTORY_DB=inventory.url,
                          SHOP_CELERY_BROKER=redis_url, SHOP_BROKER=broker.native)
        _exercise(env, tmp_path, sync_url(async_url).render_as_string(hide_password=False),
                  inventory.url)
