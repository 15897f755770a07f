"""examples/fastapi_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis,
the web part under uvicorn, over real HTTP."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

from integrations.fastapi import sync_url
from tests.examples.examples_support import (
    example_env,
    http,
    order_from_the_shop,
    postgres_and_redis,
    run,
    start_shop,
    wait_reserved,
)
from tests.support import BrokerLiteServer, PostgresServer, wait_until

PY = sys.executable
SHOP = "examples.fastapi_shop.run"


def _exercise(env: dict[str, str], tmp: Path, shop_sync_url: str, inventory_url: str) -> None:
    run([PY, "-m", SHOP, "migrate"], env, tmp)
    status = [PY, "-m", "outbox", "status", "--json", "--db", shop_sync_url]
    with contextlib.ExitStack() as stack:
        relay, address = start_shop(
            stack, env, tmp, relay=[PY, "-m", SHOP, "relay"],
            checker=[PY, "-m", SHOP, "checker"], checker_ready="checker ready",
            inventory=[PY, "-m", SHOP, "inventory"], web=[PY, "-m", SHOP, "web", "--port", "0"])
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
    with postgres_and_redis(postgres_server, redis_url, tmp_path, "fastapi", asyncpg=True) as (
            env, async_url, inventory_url):
        _exercise(env, tmp_path, sync_url(async_url).render_as_string(hide_password=False),
                  inventory_url)
