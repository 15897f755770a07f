"""``outbox.status`` and ``rocketbox status`` on seeded rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from outbox.cli import main
from outbox.status import read_status
from outbox.status_render import render_status
from tests.outbox.status.outbox_ops_support import (
    OpsDb,
    mark_parked,
    mark_relayed,
    publish_rows,
    set_rows,
)


def _seed(db: OpsDb, now: datetime) -> dict[str, list[str]]:
    """orders: 3 pending (1 claimed, oldest 2 h), 3 relayed (2 this hour), 1 parked;
    mail: 1 relayed this hour, 1 parked."""
    orders = publish_rows(db, "orders", 8)
    mail = publish_rows(db, "mail", 2)
    set_rows(db, orders[:3], created_at=now - timedelta(minutes=5))
    set_rows(db, orders[:1], created_at=now - timedelta(hours=2))
    set_rows(db, orders[1:2], claimed_by="worker:1", claimed_until=now + timedelta(seconds=30))
    mark_relayed(db, orders[3:5], now - timedelta(minutes=10))
    mark_relayed(db, orders[5:6], now - timedelta(hours=2))
    mark_parked(db, orders[6:7], error="topic orders: no route")
    set_rows(db, orders[6:7], created_at=now - timedelta(minutes=30))
    mark_relayed(db, orders[7:8], now - timedelta(minutes=1))
    mark_relayed(db, mail[:1], now - timedelta(minutes=5))
    mark_parked(db, mail[1:], error="body too large")
    set_rows(db, mail[1:], created_at=now - timedelta(minutes=1))
    return {"orders": orders, "mail": mail}


@pytest.mark.timeout(60)
def test_status_counts_per_topic(ops_db: OpsDb) -> None:
    now = datetime.now(UTC)
    seeded = _seed(ops_db, now)
    status = read_status(ops_db.engine, now=now)

    by_topic = {s.topic: s for s in status.topics}
    assert list(by_topic) == ["mail", "orders"]
    orders, mail = by_topic["orders"], by_topic["mail"]
    assert (orders.pending, orders.in_flight, orders.parked, orders.relayed_last_hour) == \
        (3, 1, 1, 3)
    assert orders.oldest_pending_age == pytest.approx(7200, abs=0.01)
    assert (mail.pending, mail.in_flight, mail.parked, mail.relayed_last_hour) == (0, 0, 1, 1)
    assert mail.oldest_pending_age is None
    assert (status.pending, status.parked) == (3, 2)
    assert status.oldest_pending_age == pytest.approx(7200, abs=0.01)

    # newest parked first, each with its last error
    assert [(r.tx_id, r.topic, r.attempts, r.last_error) for r in status.parked_rows] == [
        (seeded["mail"][1], "mail", 10, "body too large"),
        (seeded["orders"][6], "orders", 10, "topic orders: no route"),
    ]


@pytest.mark.timeout(60)
def test_status_of_an_empty_outbox(ops_db: OpsDb) -> None:
    status = read_status(ops_db.engine)
    assert status.topics == () and status.parked_rows == ()
    assert status.to_json()["totals"] == {"pending": 0, "in_flight": 0,
                                          "oldest_pending_age_seconds": None, "parked": 0,
                                          "relayed_last_hour": None}


@pytest.mark.timeout(60)
def test_status_options_leave_out_the_costly_parts(ops_db: OpsDb) -> None:
    _seed(ops_db, datetime.now(UTC))
    status = read_status(ops_db.engine, parked_limit=1, include_recent=False)
    assert len(status.parked_rows) == 1
    assert all(s.relayed_last_hour is None for s in status.topics)


@pytest.mark.timeout(60)
def test_status_table_rendering(ops_db: OpsDb) -> None:
    _seed(ops_db, datetime.now(UTC))
    console = Console(record=True, width=200)
    render_status(read_status(ops_db.engine), console)
    text = console.export_text()
    assert "orders" in text and "mail" in text and "all" in text
    assert "2.0h" in text  # the oldest pending row's age
    assert "topic orders: no route" in text and "body too large" in text


@pytest.mark.timeout(60)
def test_status_at_80_columns_keeps_an_error_readable(ops_db: OpsDb) -> None:
    [tx_id] = publish_rows(ops_db, "Orders", 1)
    error = ("access key 'shop' has no PUB permission on topic 'Oders' (it has DENY); "
             "the row was refused by the broker and parked after 10 attempts")
    mark_parked(ops_db, [tx_id], error=error)
    console = Console(record=True, width=80)
    render_status(read_status(ops_db.engine), console)
    lines = [line.strip() for line in console.export_text().splitlines()]
    assert any(tx_id in line for line in lines)
    error_lines = lines[next(i for i, line in enumerate(lines) if line.startswith("access")):]
    # the error flows over the full width: a few lines, not one word per line
    assert " ".join(error_lines[:3]).startswith(error[:150])
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.timeout(60)
def test_status_command_json(ops_db: OpsDb, capsys: pytest.CaptureFixture[str]) -> None:
    seeded = _seed(ops_db, datetime.now(UTC))
    assert main(["status", "--db", ops_db.url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["pending"] == 3
    assert data["totals"]["parked"] == 2
    assert data["totals"]["relayed_last_hour"] == 4
    assert data["totals"]["oldest_pending_age_seconds"] >= 7200
    orders = next(t for t in data["topics"] if t["topic"] == "orders")
    assert orders == {"topic": "orders", "pending": 3, "in_flight": 1,
                      "oldest_pending_age_seconds": orders["oldest_pending_age_seconds"],
                      "parked": 1, "relayed_last_hour": 3}
    assert {r["tx_id"] for r in data["parked_rows"]} == {seeded["orders"][6],
                                                         seeded["mail"][1]}


@pytest.mark.timeout(60)
def test_status_command_table(ops_db: OpsDb, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at 80 columns when not on a terminal
    _seed(ops_db, datetime.now(UTC))
    assert main(["status", "--db", ops_db.url]) == 0
    out = capsys.readouterr().out
    assert "rocketbox outbox at" in out
    assert "parked rows" in out and "body too large" in out
