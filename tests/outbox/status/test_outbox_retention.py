"""``outbox.retention`` and ``rocketbox retention``: only old relayed rows and old inbox rows go."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from outbox.cli import main
from outbox.models import transaction_table as t
from outbox.retention import count_expired, purge
from tests.outbox.status.outbox_ops_support import (
    OpsDb,
    add_inbox,
    inbox_count,
    mark_parked,
    mark_relayed,
    publish_rows,
    set_rows,
    tx_ids,
)


def _seed(db: OpsDb, now: datetime) -> dict[str, list[str]]:
    ids = publish_rows(db, "orders", 12)
    seeded = {"old_relayed": ids[:5], "new_relayed": ids[5:7], "old_pending": ids[7:10],
              "old_parked": ids[10:12]}
    mark_relayed(db, seeded["old_relayed"], now - timedelta(days=10))
    mark_relayed(db, seeded["new_relayed"], now - timedelta(days=1))
    set_rows(db, seeded["old_pending"], created_at=now - timedelta(days=30))
    mark_parked(db, seeded["old_parked"])
    set_rows(db, seeded["old_parked"], created_at=now - timedelta(days=30))
    add_inbox(db, "billing", 4, now - timedelta(days=40))
    add_inbox(db, "billing", 2, now - timedelta(days=1))
    return seeded


@pytest.mark.timeout(60)
def test_purge_deletes_only_old_relayed_rows_in_batches(ops_db: OpsDb) -> None:
    now = datetime.now(UTC)
    seeded = _seed(ops_db, now)
    week, month = now - timedelta(days=7), now - timedelta(days=30)
    assert count_expired(ops_db.engine, relayed_before=week, inbox_before=month) == (5, 4)

    calls: list[tuple[str, int]] = []
    report = purge(ops_db.engine, relayed_before=week, inbox_before=month, batch=2,
                   progress=lambda table, n: calls.append((table, n)))
    assert (report.transactions, report.inbox, report.batches) == (5, 4, 7)
    assert calls == [("rocketbox_transaction", 2), ("rocketbox_transaction", 2),
                     ("rocketbox_transaction", 1), ("rocketbox_transaction", 0),
                     ("rocketbox_inbox", 2), ("rocketbox_inbox", 2), ("rocketbox_inbox", 0)]
    kept = set(seeded["new_relayed"] + seeded["old_pending"] + seeded["old_parked"])
    assert tx_ids(ops_db) == kept
    assert inbox_count(ops_db) == 2


@pytest.mark.timeout(60)
def test_purge_without_an_inbox_cut_off_keeps_the_inbox(ops_db: OpsDb) -> None:
    now = datetime.now(UTC)
    _seed(ops_db, now)
    report = purge(ops_db.engine, relayed_before=now)  # everything relayed so far
    assert (report.transactions, report.inbox, report.batches) == (7, 0, 2)
    assert inbox_count(ops_db) == 6
    with ops_db.engine.connect() as conn:  # unrelayed and parked rows survive any age
        assert conn.execute(select(t.c.relayed_at.is_(None))).scalars().all() == [True] * 5


@pytest.mark.timeout(30)
def test_purge_refuses_an_empty_batch(ops_db: OpsDb) -> None:
    with pytest.raises(ValueError, match="batch must be >= 1"):
        purge(ops_db.engine, relayed_before=datetime.now(UTC), batch=0)


@pytest.mark.postgres
@pytest.mark.parametrize("ops_db", ["postgresql"], indirect=True)  # SKIP LOCKED is PG's path
@pytest.mark.timeout(60)
def test_postgresql_purge_skips_rows_another_transaction_holds(ops_db: OpsDb) -> None:
    assert ops_db.dialect == "postgresql"
    now = datetime.now(UTC)
    seeded = _seed(ops_db, now)
    held = seeded["old_relayed"][0]
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with ops_db.engine.begin() as conn:
            conn.execute(select(t.c.tx_id).where(t.c.tx_id == held).with_for_update())
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(10)
        report = purge(ops_db.engine, relayed_before=now - timedelta(days=7), batch=10)
        assert report.transactions == 4  # did not wait for the held row
        assert held in tx_ids(ops_db)
    finally:
        release.set()
        holder.join(10)
    assert purge(ops_db.engine, relayed_before=now - timedelta(days=7)).transactions == 1
    assert held not in tx_ids(ops_db)


@pytest.mark.timeout(60)
def test_retention_command(ops_db: OpsDb, capsys: pytest.CaptureFixture[str]) -> None:
    now = datetime.now(UTC)
    seeded = _seed(ops_db, now)
    args = ["retention", "--db", ops_db.url, "--days", "7", "--inbox-days", "30"]
    assert main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out == "would delete 5 relayed row(s) and 4 inbox row(s)\n"
    assert len(tx_ids(ops_db)) == 12

    assert main([*args, "--batch", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "deleted 5 relayed row(s) and 4 inbox row(s) in 7 batch(es)\n"
    assert "relayed rows" in captured.err  # the progress bar, on stderr
    assert not set(seeded["old_relayed"]) & tx_ids(ops_db)

    assert main(["retention", "--db", ops_db.url, "--days", "0", "--no-progress"]) == 0
    assert capsys.readouterr().out == \
        "deleted 2 relayed row(s) and 0 inbox row(s) in 2 batch(es)\n"
    assert len(tx_ids(ops_db)) == 5


@pytest.mark.timeout(30)
def test_retention_command_validates_its_numbers(ops_db: OpsDb,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--days", "-1"], ["--days", "soon"], ["--days", "1", "--batch", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["retention", "--db", ops_db.url, *bad])
        assert exit_info.value.code == 2
    assert "days must be >= 0" in capsys.readouterr().err
