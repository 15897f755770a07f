"""The sweeper names the part a fault is in, retries what waiting can fix, and stops on what
it cannot (missing outbox tables): on real SQLite files and a real refused connection."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from outbox import Outbox, RelaySettings
from outbox.celery import CelerySettings, make_celery
from outbox.celery.app import rocketbox_state
from outbox.celery.faults import classify
from outbox.celery.sweeper import Sweeper
from outbox.errors import BrokerUnreachableError
from outbox.migrate import engine_for
from tests.support import free_port, wait_until


def _sweeper(db_url: str, broker: str, tmp: Path) -> tuple[Sweeper, list[str]]:
    outbox = Outbox(engine=engine_for(db_url), broker=broker,
                    relay=RelaySettings(broker_timeout=1.0))
    app = make_celery(outbox, broker_url=f"sqla+sqlite:///{tmp / 'q.sqlite'}",
                      settings=CelerySettings(sweep_interval=0.2, polling_interval=0.05))
    fatal: list[str] = []
    return Sweeper(rocketbox_state(app), on_fatal=fatal.append), fatal


@pytest.mark.timeout(60)
def test_missing_tables_stop_the_sweeper_instead_of_blaming_the_broker(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sweeper, fatal = _sweeper(f"sqlite:///{tmp_path / 'empty.sqlite'}",
                              f"127.0.0.1:{free_port()}", tmp_path)
    caplog.set_level(logging.WARNING, logger="rocketbox")
    sweeper.start()
    try:
        wait_until(lambda: fatal, timeout=30)
    finally:
        sweeper.stop()
    assert fatal == ["the sweeper lane stopped: database: the outbox tables are missing (no "
                     "such table: rocketbox_transaction): run `rocketbox migrate`"]
    assert "broker is back" not in caplog.text


@pytest.mark.timeout(60)
def test_an_unreachable_database_is_retried_and_named_as_the_database(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    sweeper, fatal = _sweeper(f"postgresql+psycopg://app:pw@127.0.0.1:{port}/shop",
                              f"127.0.0.1:{free_port()}", tmp_path)
    caplog.set_level(logging.WARNING, logger="rocketbox")
    assert sweeper.sweep() is None  # transient: logged, the next tick tries again
    assert not fatal
    (line,) = [r.getMessage() for r in caplog.records if "sweep failed" in r.getMessage()]
    assert line.startswith(f"sweep failed: database postgresql+psycopg://app:***@127.0.0.1:"
                           f"{port}/shop: ")
    assert "broker" not in line


@pytest.mark.timeout(30)
def test_classify_real_faults(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.sqlite'}")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT * FROM rocketbox_transaction"))
    except Exception as exc:
        missing = classify(exc)
    finally:
        engine.dispose()
    assert missing is not None
    assert (missing.component, missing.transient) == ("database", False)
    broker = classify(BrokerUnreachableError("cannot connect to broker at 127.0.0.1:1"))
    assert broker is not None and (broker.component, broker.transient) == ("broker", True)
    assert classify(ValueError("a bug")) is None
