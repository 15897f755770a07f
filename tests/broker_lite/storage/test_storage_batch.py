"""MessageStore.put_batch_nowait: one append for many records, each stored or refused alone.

The batch path must write exactly the bytes, queue units and index entries
that appending the same records one by one writes (byte-for-byte against a
second store), answer each record on its own, and keep the full-disk promise
record by record: what a batch stored survives, what it refused left nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_lite.errors import (
    DiskFullError,
    InvalidMessageError,
    MessageTooLargeError,
    StoreClosedError,
)
from broker_lite.storage import MessageStore, MessageToStore, PutResult, TxType
from tests.broker_lite.storage.storage_support import body_for, message_for, tiny_config
from tests.support.small_disk import mounted_tmpfs

pytestmark = pytest.mark.timeout(60)

STORE_TS = 1_790_000_000_000


def _mixed(count: int) -> list[MessageToStore]:
    """Plain records over two topics, halves (no queue), a refusal every so often."""
    msgs: list[MessageToStore] = []
    for seq in range(count):
        msg = message_for(seq, topic="Orders" if seq % 5 else "Audit")
        sysflag = int(TxType.PREPARED) if seq % 7 == 3 else 0
        if seq % 11 == 5:
            msg = MessageToStore(topic=msg.topic, body=b"x" * 4096, queue_id=0)  # too large
        elif seq % 13 == 6:
            msg = MessageToStore(topic=msg.topic, body=b"bad", queue_id=70_000)
        msgs.append(MessageToStore(topic=msg.topic, body=msg.body, queue_id=msg.queue_id,
                                   sysflag=sysflag, properties=msg.properties,
                                   born_timestamp=STORE_TS - seq, store_timestamp=STORE_TS))
    return msgs


def _log_bytes(store: MessageStore) -> bytes:
    return store.get_raw(store.min_offset, store.max_offset - store.min_offset)


def test_a_batch_writes_what_one_by_one_appends_write(tmp_path: Path) -> None:
    msgs = _mixed(300)
    batched = MessageStore(tiny_config(tmp_path / "batched"))
    single = MessageStore(tiny_config(tmp_path / "single"))
    try:
        outcomes: list[PutResult | Exception] = []
        for start in range(0, len(msgs), 64):  # several batches, segments roll inside them
            outcomes += batched.put_batch_nowait(msgs[start:start + 64])
        _assert_same_outcomes(outcomes, _one_by_one(single, msgs))
        refused = [o for o in outcomes if isinstance(o, Exception)]
        assert len(refused) == sum(1 for seq in range(300) if seq % 11 == 5 or seq % 13 == 6)
        assert all("queue_id" in str(e) or "4096" in str(e) for e in refused)
        assert batched.max_offset > 4 * 4096  # several segments
        assert _log_bytes(batched) == _log_bytes(single)
        for topic in ("Orders", "Audit"):
            for queue_id in range(3):
                assert batched.queue_units(topic, queue_id, 0, 1000) == \
                    single.queue_units(topic, queue_id, 0, 1000)
        for seq in (0, 1, 3, 17, 299):
            key = f"u{seq}"
            assert [r.physical_offset for r in batched.lookup_key(key)] == \
                [r.physical_offset for r in single.lookup_key(key)]
    finally:
        batched.close()
        single.close()


def test_a_batch_survives_a_reopen_and_refuses_nothing_it_stored(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "store")
    msgs = [message_for(seq) for seq in range(200)]
    with MessageStore(config) as store:
        outcomes = store.put_batch_nowait(msgs)
        assert all(isinstance(o, PutResult) for o in outcomes)
    with MessageStore(config) as reopened:
        assert reopened.recovery.corruption is None
        for msg, put in zip(msgs, outcomes, strict=True):
            assert isinstance(put, PutResult)
            record = reopened.get(put.physical_offset)
            assert (record.body, record.queue_id, record.queue_offset) == (
                msg.body, msg.queue_id, put.queue_offset)
        with pytest.raises(StoreClosedError):
            store.put_batch_nowait(msgs[:1])


def _one_by_one(store: MessageStore, msgs: list[MessageToStore]) -> list[PutResult | Exception]:
    """What appending ``msgs`` one at a time gives: a result or the refusal, each."""
    out: list[PutResult | Exception] = []
    for msg in msgs:
        try:
            out.append(store.put_nowait(msg))
        except (MessageTooLargeError, InvalidMessageError) as exc:
            out.append(exc)
    return out


def _assert_same_outcomes(outcomes: list[PutResult | Exception],
                          expected: list[PutResult | Exception]) -> None:
    assert [type(o) for o in outcomes] == [type(e) for e in expected]
    assert [o for o in outcomes if isinstance(o, PutResult)] == [
        e for e in expected if isinstance(e, PutResult)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "256k") as mount_point:
        yield mount_point


def test_a_full_disk_mid_batch_keeps_what_the_batch_stored(small_disk: Path) -> None:
    config = tiny_config(small_disk / "store")
    store = MessageStore(config)
    stored: dict[int, int] = {}
    refused = 0
    seq = 0
    while refused == 0 and seq < 100_000:
        outcomes = store.put_batch_nowait([message_for(s) for s in range(seq, seq + 40)])
        for s, outcome in zip(range(seq, seq + 40), outcomes, strict=True):
            if isinstance(outcome, PutResult):  # a later record may still fit
                stored[s] = outcome.physical_offset
            else:
                assert isinstance(outcome, DiskFullError) and outcome.retriable
                refused += 1
        seq += 40
    assert refused and len(stored) > 50
    end = store.max_offset
    assert [store.get(o).body for o in stored.values()] == [body_for(s) for s in stored]
    store.close()
    with MessageStore(config) as reopened:
        assert reopened.recovery.corruption is None
        assert reopened.max_offset == end
        assert [reopened.get(o).body for o in stored.values()] == [body_for(s) for s in stored]


def test_batches_that_fit_and_batches_that_roll_over_write_the_same_bytes(
        tmp_path: Path) -> None:
    """Batches of 1 to 9 records: most fit in the segment and index file in hand (one
    pass), some roll a segment, a queue file or an index file over inside the batch
    (record by record); both write what one-by-one appends write."""
    msgs = _mixed(400)
    batched = MessageStore(tiny_config(tmp_path / "batched", index_entries=40))
    single = MessageStore(tiny_config(tmp_path / "single", index_entries=40))
    try:
        outcomes: list[PutResult | Exception] = []
        start = size = 0
        while start < len(msgs):
            size = size % 9 + 1
            outcomes += batched.put_batch_nowait(msgs[start:start + size])
            start += size
        _assert_same_outcomes(outcomes, _one_by_one(single, msgs))
        assert _log_bytes(batched) == _log_bytes(single)
        for topic in ("Orders", "Audit"):
            for queue_id in range(3):
                assert batched.queue_units(topic, queue_id, 0, 1000) == \
                    single.queue_units(topic, queue_id, 0, 1000)
        for seq in range(0, 400, 7):
            for key in (f"u{seq}", f"k{seq}"):
                assert [r.physical_offset for r in batched.lookup_key(key)] == \
                    [r.physical_offset for r in single.lookup_key(key)]
        index_files = sorted(p.name for p in (tmp_path / "batched" / "index").iterdir())
        assert len(index_files) > 3  # the index rolled over, inside batches too
        assert index_files == sorted(p.name for p in (tmp_path / "single" / "index").iterdir())
    finally:
        batched.close()
        single.close()
