"""kill -9 a ``--flush sync`` broker while a relay sends halves and ends them in batches.

The relay's two requests, ``SEND_BATCH`` of halves and ``END_TRANSACTION_BATCH``,
are each answered once one ``fdatasync`` covers every record they wrote (the
batch's records, one durability wait). After the crash, the data directory is
opened again (recovery runs) and every acknowledgement must hold: each
acknowledged half is known, each acknowledged commit is visible once and
committed, each acknowledged rollback is rolled back and invisible.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from broker_lite.client import (
    AsyncProducer,
    LocalTransactionState,
    Message,
    TransactionEnd,
    TransactionEndResult,
)
from broker_lite.errors import BrokerError
from tests.broker_lite.core.core_support import make_broker, pull_all
from tests.support import start_broker_lite, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
BATCH = 64


class Acks:
    """What the broker acknowledged, filled by the relay's thread."""

    def __init__(self) -> None:
        self.halves: set[str] = set()
        self.committed: set[str] = set()
        self.rolled_back: set[str] = set()
        self.lock = threading.Lock()


async def _relay(server: str, acks: Acks, stop: threading.Event) -> None:
    async with AsyncProducer("batch-relay", server, timeout=5.0) as producer:
        n = 0
        while not stop.is_set():
            ids = [f"tx-{n + i}" for i in range(BATCH)]
            n += BATCH
            try:
                halves = await producer.send_halves(
                    [Message("Pay", tx_id.encode(), msg_id=tx_id) for tx_id in ids])
                sent = [h for h in halves if not isinstance(h, BrokerError)]
                with acks.lock:
                    acks.halves.update(h.msg_id for h in sent)
                ends = await producer.end_transactions([TransactionEnd(
                    h.transaction_id or h.msg_id,
                    LocalTransactionState.COMMIT_MESSAGE if i % 3 else
                    LocalTransactionState.ROLLBACK_MESSAGE,
                    h.commit_log_offset, h.queue_offset, h.msg_id)
                    for i, h in enumerate(sent)])
            except (BrokerError, ConnectionError, TimeoutError, OSError):
                return  # the broker died
            with acks.lock:
                for end in ends:
                    if isinstance(end, TransactionEndResult):
                        target = (acks.committed if end.outcome == "committed"
                                  else acks.rolled_back)
                        target.add(end.transaction_id)


def test_kill_nine_during_batched_transactions_keeps_every_acknowledgement(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    acks = Acks()
    stop = threading.Event()
    with start_broker_lite(data_dir, ("--flush", "sync", "--tx-timeout", "3600")) as broker:
        relay = threading.Thread(target=asyncio.run,
                                 args=(_relay(broker.native, acks, stop),))
        relay.start()
        try:
            wait_until(lambda: len(acks.committed) >= 600, timeout=60,
                       message="the relay committing in batches")
            broker.kill()
        finally:
            stop.set()
            relay.join(timeout=60)
    assert not relay.is_alive()
    with acks.lock:
        halves, committed, rolled_back = (set(acks.halves), set(acks.committed),
                                          set(acks.rolled_back))
    assert committed and rolled_back and committed | rolled_back <= halves

    recovered = make_broker(data_dir, flush="sync", segment_size=64 << 20)
    try:
        visible = [m.msg_id for m in pull_all(recovered, "Pay")]
        assert len(visible) == len(set(visible)), "a commit is visible twice"
        assert committed <= set(visible), f"lost commits: {sorted(committed - set(visible))[:3]}"
        assert not rolled_back & set(visible)
        states = {tx_id: entry.state for tx_id in halves
                  if (entry := recovered.transactions.get(tx_id)) is not None}
        assert set(states) == halves, f"lost halves: {sorted(halves - set(states))[:3]}"
        assert all(states[tx_id] == "committed" for tx_id in committed)
        assert all(states[tx_id] == "rolled_back" for tx_id in rolled_back)
    finally:
        recovered.close()
