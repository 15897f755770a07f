"""The shops' parts fail at start, in one line naming the setting, when the database is not
migrated or does not answer, or the broker address is malformed; no part says "ready"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.examples_support import FLASK, example_env
from tests.support import free_port

PY = sys.executable


def _run(argv: list[str], tmp: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = example_env(**{"SHOP_BROKER": f"127.0.0.1:{free_port()}", **settings})
    return subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("shop, part", [("flask", "relay"), ("flask", "checker"),
                                        ("flask", "web"), ("fastapi", "relay"),
                                        ("fastapi", "checker"), ("fastapi", "web")])
@pytest.mark.timeout(150)
def test_an_unmigrated_shop_database_fails_at_start(shop: str, part: str,
                                                     tmp_path: Path) -> None:
    prog = f"python -m examples.{shop}_shop.run"
    done = _run([PY, "-m", f"examples.{shop}_shop.run", part], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    db = tmp_path / ("var/shop.sqlite" if shop == "flask" else "shop.sqlite")
    assert done.stderr == (
        f"{prog} {part}: SHOP_DB: sqlite:///{db} has no rocketbox tables "
        f"(rocketbox_broker_state, rocketbox_inbox, rocketbox_transaction missing); run "
        f"`{prog} migrate` first\n")
    assert "ready" not in done.stdout


@pytest.mark.parametrize("shop", ["flask", "fastapi"])
@pytest.mark.timeout(150)
def test_a_malformed_shop_broker_fails_at_start(shop: str, tmp_path: Path) -> None:
    for part in ("relay", "web"):
        done = _run([PY, "-m", f"examples.{shop}_shop.run", part], tmp_path,
                    SHOP_BROKER="127.0.0.1")
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(f"python -m examples.{shop}_shop.run {part}: "
                                      f"SHOP_BROKER = '127.0.0.1': endpoint '127.0.0.1' has "
                                      f"no HOST:PORT")
        assert done.stderr.count("\n") == 1


@pytest.mark.timeout(150)
def test_flask_rocketbox_relay_on_an_unreachable_database(tmp_path: Path) -> None:
    port = free_port()
    done = _run([str(FLASK), "--app", "examples.flask_shop.wsgi", "rocketbox", "relay"],
                tmp_path, SHOP_DB=f"postgresql+psycopg://shop:pw@127.0.0.1:{port}/shop")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (f"Error: ROCKETBOX_DATABASE: the database does not answer: cannot "
                           f"connect to postgresql+psycopg://shop:***@127.0.0.1:{port}/shop: "
                           f"connection refused\n")
