"""examples/flask_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

from tests.examples.examples_support import (
    FLASK,
    example_env,
    order_from_the_shop,
    postgres_and_redis,
    run,
    start_shop,
    wait_reserved,
)
from tests.support import BrokerLiteServer, PostgresServer, wait_until

PY = sys.executable
SHOP = "examples.flask_shop.run"
APP = "examples.flask_shop.wsgi"


def _exercise(env: dict[str, str], tmp: Path, inventory_url: str) -> None:
    run([PY, "-m", SHOP, "migrate"], env, tmp)
    with contextlib.ExitStack() as stack:
        relay, address = start_shop(
            stack, env, tmp, relay=[str(FLASK), "--app", APP, "rocketbox", "relay"],
            checker=[str(FLASK), "--app", APP, "rocketbox", "checker"],
            checker_ready="rocketbox checker ready", inventory=[PY, "-m", SHOP, "inventory"],
            web=[PY, "-m", SHOP, "web", "--port", "0"])
        created = order_from_the_shop(address)
        wait_reserved(inventory_url, created, relay)
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
    with postgres_and_redis(postgres_server, redis_url, tmp_path, "flask") as (
            env, _shop_url, inventory_url):
        _exercise(env, tmp_path, inventory_url)
