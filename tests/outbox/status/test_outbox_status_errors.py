"""``rocketbox status`` says why rows do not move (their last errors, grouped) and how old its
evidence of a broker outage is (a mark no relay refreshes any more is shown as stale) and which
relay process reported it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy import create_engine, update

from outbox import migrate
from outbox.broker_health import note_reachable, note_unreachable
from outbox.cli import main
from outbox.errors import BrokerUnreachableError
from outbox.models import broker_state_table
from outbox.status import read_status
from outbox.status_render import render_status
from tests.outbox.status.outbox_ops_support import OpsDb, mark_parked, publish_rows, set_rows

NO_TOPIC = "topic 'Orders' does not exist"


def _failing(db: OpsDb) -> dict[str, list[str]]:
    """Orders: 3 pending rows failing on a missing topic, 1 parked on it; mail: 1 pending row
    failing otherwise, 1 pending row that never failed."""
    orders = publish_rows(db, "Orders", 4)
    mail = publish_rows(db, "mail", 2)
    set_rows(db, orders[:3], attempts=2, last_error=NO_TOPIC)
    mark_parked(db, orders[3:], error=NO_TOPIC)
    set_rows(db, mail[:1], attempts=1, last_error="body too large:\n  5 MiB > 4 MiB")
    return {"orders": orders, "mail": mail}


@pytest.mark.timeout(60)
def test_last_errors_are_grouped_most_rows_first(ops_db: OpsDb) -> None:
    _failing(ops_db)
    status = read_status(ops_db.engine)
    assert [(e.error, e.pending, e.parked, e.topics) for e in status.errors] == [
        (NO_TOPIC, 3, 1, ("Orders",)),
        ("body too large: 5 MiB > 4 MiB", 1, 0, ("mail",)),
    ]
    data = status.to_json()["errors"]
    assert [(e["error"], e["rows"]) for e in data] == [(NO_TOPIC, 4),
                                                       ("body too large: 5 MiB > 4 MiB", 1)]


@pytest.mark.timeout(60)
def test_the_status_command_shows_the_errors_of_pending_rows(
        ops_db: OpsDb, capsys: pytest.CaptureFixture[str]) -> None:
    orders = publish_rows(ops_db, "Orders", 2)  # the case: pending 2, nothing parked
    set_rows(ops_db, orders, attempts=3, last_error=NO_TOPIC)
    assert main(["status", "--db", ops_db.url]) == 0
    out = capsys.readouterr().out
    assert "last errors of unrelayed rows" in out
    assert "2 row(s) (2 pending)  topics: Orders" in out
    assert NO_TOPIC in out
    assert main(["status", "--db", ops_db.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["errors"][0]["pending"] == 2


@pytest.mark.timeout(60)
def test_a_broker_mark_nobody_refreshes_is_shown_as_stale_with_its_age(ops_db: OpsDb) -> None:
    engine = ops_db.engine
    assert note_unreachable(engine, "127.0.0.1:1",
                            BrokerUnreachableError("cannot connect to broker at 127.0.0.1:1"))
    console = Console(record=True, width=300)
    render_status(read_status(engine), console)
    fresh = console.export_text()
    assert "broker unreachable since" in fresh and "last confirmed 0." in fresh
    assert "stale" not in fresh

    # the relay that wrote it was killed 7 minutes ago: nobody refreshed it since
    seven = datetime.now(UTC) - timedelta(minutes=7)
    with engine.begin() as conn:
        conn.execute(update(broker_state_table).values(updated_at=seven,
                                                       unreachable_since=seven))
    status = read_status(engine)
    console = Console(record=True, width=300)
    render_status(status, console)
    old = console.export_text()
    assert "broker possibly unreachable (stale): 127.0.0.1:1" in old
    assert "no relay has confirmed it for 7.0m" in old
    assert "broker unreachable since" not in old
    [mark] = status.to_json()["brokers_unreachable"]
    assert mark["stale"] is True and mark["evidence_age_seconds"] >= 420

    note_reachable(engine, "127.0.0.1:1")  # a relay reached it: the mark clears
    assert read_status(engine).unreachable == ()


_REPORT = """
import sys
from sqlalchemy import create_engine
from outbox.broker_health import note_unreachable
from outbox.errors import BrokerUnreachableError
engine = create_engine(sys.argv[1])
assert note_unreachable(engine, "127.0.0.1:1", BrokerUnreachableError("connection refused"))
"""


@pytest.mark.timeout(60)
def test_the_mark_names_the_relay_process_that_reported_it(ops_db: OpsDb) -> None:
    child = subprocess.Popen([sys.executable, "-c", _REPORT, ops_db.url],
                             stderr=subprocess.PIPE, text=True)
    _, err = child.communicate(timeout=50)
    assert child.returncode == 0, err
    status = read_status(ops_db.engine)
    [mark] = status.to_json()["brokers_unreachable"]
    assert mark["reported_by"] == f"{socket.gethostname()} pid {child.pid}"
    console = Console(record=True, width=300)
    render_status(status, console)
    assert f"by the relay {socket.gethostname()} pid {child.pid})" in console.export_text()


@pytest.mark.timeout(60)
def test_status_reads_a_mark_from_before_the_reporter_column(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    migrate.upgrade(url, "0004")  # a database not migrated since revision 0004
    engine = create_engine(url)
    assert note_unreachable(engine, "127.0.0.1:1", BrokerUnreachableError("refused"))
    [mark] = read_status(engine).unreachable
    assert mark.broker == "127.0.0.1:1" and mark.reported_by is None
    console = Console(record=True, width=300)
    render_status(read_status(engine), console)
    shown = console.export_text()
    assert "last confirmed 0." in shown and "by a relay" in shown
    engine.dispose()
