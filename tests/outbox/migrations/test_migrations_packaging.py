"""The migrations ship in the wheel, and an installed copy finds its own script location."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("outbox", "broker_lite", "integrations", "migrations", "spark")

_PROBE = """
import json, sys
import migrations
from outbox import migrate
url = sys.argv[1]
migrate.upgrade(url)
print(json.dumps({"package": migrations.__file__, "location": str(migrations.script_location()),
                  "current": migrate.current(url), "check": len(migrate.check(url))}))
"""


def _copy_sources(target: Path) -> None:
    """What the wheel is built from, outside the repo (the build writes build/ and egg-info)."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, target / name, ignore=ignore)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_installed_wheel_runs_its_migrations(tmp_path: Path) -> None:
    source, wheels, site = tmp_path / "src", tmp_path / "wheels", tmp_path / "site"
    source.mkdir()
    _copy_sources(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(wheels), str(source)], check=True, timeout=240,
                   capture_output=True)
    (wheel,) = wheels.glob("rocketbox-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("migrations/__init__.py", "migrations/env.py", "migrations/script.py.mako",
                   "migrations/partial_where.py", "migrations/versions/0001_initial.py",
                   "migrations/versions/0002_publish_function.py",
                   "migrations/versions/0003_broker_state.py",
                   "migrations/versions/0004_rocketmq_half_ids.py",
                   "migrations/versions/0005_broker_state_reporter.py",
                   "migrations/versions/0006_broker_position.py",
                   "migrations/versions/0007_transaction_fillfactor.py",
                   "outbox/migrate.py", "outbox/py.typed"):
        assert member in names, member

    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
                    "--target", str(site), str(wheel)], check=True, timeout=120,
                   capture_output=True)
    workdir = tmp_path / "elsewhere"  # not the repo: nothing found through the cwd
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", _PROBE, f"sqlite:///{workdir / 'app.db'}"],
                         cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert Path(found["package"]).is_relative_to(site)
    assert found["location"] == str(site / "migrations")
    assert found["current"] == "0007"
    assert found["check"] == 0
