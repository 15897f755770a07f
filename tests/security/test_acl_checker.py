"""A check-back responder whose account may not act as the producer group is a configuration
error (exit 2, one line naming the group), not an outage retried forever; the group's owner
serves check-backs on the same broker at the same time."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.migrate import upgrade
from outbox.targets import broker_lite_checkback
from tests.support import BrokerLiteServer

REPO = Path(__file__).resolve().parents[2]


def _secret(acl_doc: dict[str, Any], account: str) -> str:
    return next(str(a["secret_key"]) for a in acl_doc["accounts"] if a["access_key"] == account)


def _outbox(tmp_path: Path, server: BrokerLiteServer, account: str, secret: str) -> Outbox:
    engine = create_engine(f"sqlite:///{tmp_path / f'{account}.sqlite'}")
    upgrade(engine)
    return Outbox(engine=engine, broker=server.native, access_key=account, secret_key=secret)


@pytest.mark.timeout(120)
def test_a_refused_producer_group_stops_the_checker_and_the_owner_still_serves(
        tmp_path: Path, acl_broker: BrokerLiteServer, acl_doc: dict[str, Any]) -> None:
    # the owner, app (Pub on Group:rocketbox and Topic:Orders), serves check-backs
    owner = _outbox(tmp_path, acl_broker, "app", _secret(acl_doc, "app"))
    stop, ready = threading.Event(), threading.Event()
    serving = threading.Thread(target=broker_lite_checkback.serve, daemon=True,
                               args=(owner, stop, ready.set),
                               kwargs={"threads": 1, "retry_interval": 0.1})
    serving.start()
    try:
        assert ready.wait(30), "the owner's check-back responder did not connect"

        # alice, with no grant on Group:rocketbox: the command stops at once with exit 2
        db = tmp_path / "alice-cli.sqlite"
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(
            [sys.executable, "-m", "outbox", "migrate", "--db", f"sqlite:///{db}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        done = subprocess.run(
            [sys.executable, "-m", "outbox", "checker", "--db", f"sqlite:///{db}",
             "--broker", acl_broker.native, "--access-key", "alice",
             "--secret-key", _secret(acl_doc, "alice")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "producer group 'rocketbox'" in done.stderr
        assert "unreachable" not in done.stderr

        # and the responder itself (what flask and manage.py run) refuses the same way
        with pytest.raises(ConfigurationError, match="producer group 'rocketbox'") as refused:
            broker_lite_checkback.serve(_outbox(tmp_path, acl_broker, "alice",
                                                _secret(acl_doc, "alice")),
                                        threading.Event(), None, threads=1,
                                        retry_interval=0.1)
        assert refused.value.setting == "producer_group"
        assert serving.is_alive(), "the owner's responder stopped"
    finally:
        stop.set()
        serving.join(30)
