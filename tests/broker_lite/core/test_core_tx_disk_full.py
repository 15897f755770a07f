"""A full disk between a commit record and the op record that closes its half.

The commit record lands, the op record is refused (its queue needs a new file
and the disk is full), so the half is still open in the half queue. A retried
end, a check-back, and a restart must all see that the transaction is already
committed: the commit log never holds a second commit for it, and a late
rollback is refused. The end that wrote the commit record answers "committed"
(the message is visible); the check loop writes the op record once it can.
Nothing here is mocked: the disk is a real tmpfs, filled
up by a real file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from broker_lite.core import Broker, BrokerConfig, model
from broker_lite.errors import DiskFullError, TransactionConflictError
from broker_lite.storage import StoreConfig
from tests.broker_lite.core.core_support import ProducerEndpoint, pull_all
from tests.support.small_disk import fill, mounted_tmpfs

pytestmark = pytest.mark.timeout(60)
COMMIT, ROLLBACK = model.TxState.COMMIT, model.TxState.ROLLBACK
UNITS = 4  # consume-queue units per file: the op queue needs a new file every 4 ops


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "1m") as mount_point:
        yield mount_point


def _broker(data_dir: Path) -> Broker:
    store = StoreConfig(data_dir=data_dir, segment_size=128 * 1024, units_per_queue_file=UNITS,
                        index_slots=64, index_entries=256)
    return Broker(BrokerConfig(store=store, tx_timeout=1, tx_check_interval=1, tx_check_max=5))


def _half(broker: Broker, tx_id: str) -> model.SendResult:
    return broker.send("pg", model.Message(topic="Pay", body=tx_id.encode(), msg_id=tx_id,
                                           transactional=True)).result


def _end(broker: Broker, sent: model.SendResult, state: int, *,
         from_check: bool = False) -> model.EndResult:
    return broker.end_transaction(model.EndRequest(
        producer_group="pg", transaction_id=sent.transaction_id, state=state,
        commit_log_offset=sent.commit_log_offset, queue_offset=sent.queue_offset,
        msg_id=sent.msg_id, from_check=from_check)).response


def _stuck_commit(data_dir: Path) -> tuple[Broker, model.SendResult, Path]:
    """A broker whose last commit is in the log but whose op record the full disk refused."""
    broker = _broker(data_dir)
    sent = [_half(broker, f"tx-{i}") for i in range(UNITS + 2)]  # tx-5 stays pending
    _end(broker, sent[0], COMMIT)  # opens Pay's queue file and the op queue's first file
    for other in sent[1:UNITS]:
        _end(broker, other, ROLLBACK)  # the op queue's first file is now full
    filler = fill(data_dir.parent)
    assert _end(broker, sent[UNITS], COMMIT).outcome == "committed"
    assert broker.transactions.pending_count == 2  # tx-5, and tx-4's op record was refused
    return broker, sent[UNITS], filler


def _commits_of(broker: Broker, tx_id: str) -> int:
    return sum(1 for msg in pull_all(broker, "Pay") if msg.body == tx_id.encode())


def test_a_retried_commit_writes_no_second_commit_record(disk: Path) -> None:
    broker, stuck, filler = _stuck_commit(disk / "b")
    with closing(broker):
        assert _commits_of(broker, "tx-4") == 1  # the commit record did land
        assert _end(broker, stuck, COMMIT).outcome == "committed"  # the op still cannot
        assert broker.transactions.pending_count == 2
        filler.unlink()
        assert _end(broker, stuck, COMMIT).outcome == "committed"
        assert _commits_of(broker, "tx-4") == 1
        assert broker.transactions.pending_count == 1


def test_a_rollback_after_the_commit_record_is_refused(disk: Path) -> None:
    broker, stuck, filler = _stuck_commit(disk / "b")
    with closing(broker):
        filler.unlink()
        with pytest.raises(TransactionConflictError):
            _end(broker, stuck, ROLLBACK, from_check=True)
        assert _commits_of(broker, "tx-4") == 1


def test_a_rollback_the_full_disk_refused_leaves_the_half_to_retry(disk: Path) -> None:
    broker, _, filler = _stuck_commit(disk / "b")
    with closing(broker):
        waiting = broker.transactions.get("tx-5")
        assert waiting is not None
        sent = model.SendResult(msg_id="tx-5", topic="Pay", queue_id=0, queue_offset=UNITS + 1,
                                commit_log_offset=waiting.half_offset, transaction_id="tx-5")
        with pytest.raises(DiskFullError):
            _end(broker, sent, ROLLBACK)
        assert broker.transactions.get("tx-5") is waiting and waiting.state == "pending"
        filler.unlink()
        assert _end(broker, sent, ROLLBACK).outcome == "rolled_back"
        assert _commits_of(broker, "tx-5") == 0


def test_the_check_service_closes_the_half_instead_of_asking(disk: Path) -> None:
    broker, stuck, filler = _stuck_commit(disk / "b")
    with closing(broker):
        endpoint = ProducerEndpoint()
        broker.register(model.ClientRegistration(client_id=endpoint.client_id,
                                                 producer_groups=["pg"]), endpoint)
        entry = broker.transactions.get("tx-4")
        assert entry is not None
        late = entry.store_ts + 60_000
        broker.transactions.check(late)  # disk still full: the half stays open
        assert broker.transactions.get("tx-4") is entry and entry.state == "pending"
        filler.unlink()
        broker.transactions.check(late + 1_000)
        assert entry.state == "committed"
        assert {c.transaction_id for c in endpoint.checks} == {"tx-5"}  # never tx-4
        assert broker.transactions.pending_count == 1
        assert _end(broker, stuck, COMMIT).already
        assert _commits_of(broker, "tx-4") == 1


def test_a_restart_sees_the_commit_record(disk: Path) -> None:
    broker, stuck, filler = _stuck_commit(disk / "b")
    broker.close()
    filler.unlink()
    with closing(_broker(disk / "b")) as reopened:
        entry = reopened.transactions.get("tx-4")
        assert entry is not None and entry.state == "committed"
        assert _end(reopened, stuck, COMMIT).already
        assert _commits_of(reopened, "tx-4") == 1


def test_a_restart_on_a_still_full_disk_starts_and_closes_the_half_later(disk: Path) -> None:
    broker, stuck, filler = _stuck_commit(disk / "b")
    broker.close()
    # the op record cannot be written yet: start anyway
    with closing(_broker(disk / "b")) as reopened:
        entry = reopened.transactions.get("tx-4")
        assert entry is not None and entry.commit_offset >= 0
        assert _end(reopened, stuck, COMMIT).outcome == "committed"
        filler.unlink()
        reopened.transactions.check(entry.store_ts + 60_000)
        assert reopened.transactions.pending_count == 1
        assert _commits_of(reopened, "tx-4") == 1
