"""Each example README's embedded-default commands, run as written: the long-running parts
(broker, relay, checker, inventory, web) started in that order, then the one-shot commands
(migrate, check, curl, status, sqlite3), then the orders must reach the inventory and
``rocketbox status`` must show nothing pending.

The only change to a command is the ports: 10911 and 8000 become free ones (tests run in
parallel), and ``SHOP_BROKER`` says so to the parts that default to 10911. Each runs with
``bash -c`` in a fresh folder, the virtualenv first on ``PATH`` (as after
``. .venv/bin/activate``) and the repository on ``PYTHONPATH`` (as run from its root).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.examples.examples_support import READY_TIMEOUT, REPO, example_env, running
from tests.support import free_port, wait_until

#: the long-running parts, by their command line, and what each prints once it is ready
READY = [(r"broker_lite serve", r"broker_lite ready"),
         (r"(^|\s)(rocketbox_)?relay(\s|$)", r"ready\."),
         (r"(^|\s)(rocketbox_)?checker(\s|$)", r"checker ready"),
         (r"(^|\s)inventory(\s|$)", r"inventory ready"),
         (r"(^|\s)(run|web|serve) --port ", r"(shop ready http://\S+|Running on http://\S+)")]


def _long_running(command: str) -> bool:
    return any(re.search(pattern, _bare(command)) for pattern, _ in READY)


def readme_commands(readme: Path) -> list[str]:
    """The ``$ `` commands of the README's ```console blocks that are not marked
    ``<!-- not run: ... -->``, continuation lines joined."""
    commands: list[str] = []
    lines = readme.read_text().splitlines()
    skip = inside = False
    current: str | None = None
    for number, line in enumerate(lines):
        if line.startswith("```console"):
            inside = True
            skip = number > 0 and lines[number - 1].startswith("<!-- not run")
            continue
        if inside and line.startswith("```"):
            inside = False
            continue
        if not inside or skip:
            continue
        if current is not None:  # a continuation of the previous command
            current += " " + line.strip()
        elif line.startswith("$ "):
            current = line[2:]
        else:
            continue  # the output the README shows
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            commands.append(current)
            current = None
    return commands


def _bare(command: str) -> str:
    """The command without its trailing ``# comment``."""
    return re.sub(r"\s+#.*$", "", command)


def _ready_pattern(command: str) -> str:
    return next(ready for pattern, ready in READY if re.search(pattern, _bare(command)))


def _env(broker_port: int) -> dict[str, str]:
    env = example_env(SHOP_BROKER=f"127.0.0.1:{broker_port}")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.parametrize("shop", ["flask_shop", "django_shop", "fastapi_shop"])
@pytest.mark.timeout(420)
def test_the_readme_commands_work_as_written(shop: str, tmp_path: Path) -> None:
    commands = readme_commands(REPO / "examples" / shop / "README.md")
    assert any("broker_lite serve" in c for c in commands), commands
    broker_port, web_port = free_port(), free_port()
    env = _env(broker_port)

    def ported(command: str) -> str:
        return command.replace("10911", str(broker_port)).replace("8000", str(web_port))

    long_running = [c for c in commands if _long_running(c)]
    one_shot = [c for c in commands if c not in long_running]
    setup = [c for c in one_shot if re.search(r"\bmigrate\b|\bcheck\b", _bare(c))]
    afterwards = [c for c in one_shot if c not in setup]
    outputs: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        parts = []
        for command in long_running:
            if command.startswith("python -m broker_lite"):  # the broker before the rest
                parts.append(stack.enter_context(running(
                    "broker", ["bash", "-c", ported(command)], env, tmp_path,
                    _ready_pattern(command), READY_TIMEOUT)))
        for command in setup:
            done = subprocess.run(["bash", "-c", ported(command)], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        for number, command in enumerate(long_running):
            if command.startswith("python -m broker_lite"):
                continue
            parts.append(stack.enter_context(running(
                f"part{number}", ["bash", "-c", ported(command)], env, tmp_path,
                _ready_pattern(command), READY_TIMEOUT)))
        for command in afterwards:
            done = subprocess.run(["bash", "-c", ported(command)], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            outputs[command] = done.stdout
        orders = [out for c, out in outputs.items() if c.startswith("curl") and '"price"' in out]
        assert orders, outputs  # the README's order was taken (201 with its price)
        refs = [json.loads(out)["ref"] for out in orders]
        inventory = tmp_path / ("inventory.sqlite" if shop == "fastapi_shop"
                                else "var/inventory.sqlite")
        engine = create_engine(f"sqlite:///{inventory}")
        try:
            def reserved() -> list[str]:
                with engine.connect() as conn:
                    return sorted(conn.execute(text(
                        "SELECT order_ref FROM inventory_reservation")).scalars())
            wait_until(lambda: reserved() == sorted(refs), timeout=60,
                       ignore=(Exception,), message=lambda: "\n".join(
                           p.output()[-1500:] for p in parts))
        finally:
            engine.dispose()
        shop_db = tmp_path / ("shop.sqlite" if shop == "fastapi_shop" else "var/shop.sqlite")
        status = subprocess.run(
            [str(Path(sys.executable).parent / "rocketbox"), "status", "--json", "--db",
             f"sqlite:///{shop_db}"], capture_output=True, text=True, timeout=60, env=env)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert (data["totals"]["pending"], data["totals"]["parked"], data["errors"]) == \
            (0, 0, [])
