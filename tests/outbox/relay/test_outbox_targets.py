"""The broker_lite target keeps the seam's contract (docs/targets.md) against a real broker.

One outcome per row, in order, naming what is at fault; a request that never
got through raises instead, and the publisher tries to connect again on the
next call.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from broker_lite.client import Admin
from outbox import BrokerLitePublisher, BrokerUnreachableError, Outbox, RelaySettings
from outbox.errors import RowFault, RowRefusedError
from outbox.targets import HalfStored, LeftToCheckback, OutgoingMessage, TxEnd, TxEnded
from tests.outbox.relay.outbox_relay_support import FAST_BROKER
from tests.support import free_port, start_broker_lite

SETTINGS = RelaySettings(broker_timeout=5.0)


def _outbox(broker: str) -> Outbox:
    # the target never reads the database: an empty SQLite one stands in for the engine
    return Outbox(engine=create_engine("sqlite://"), broker=broker, relay=SETTINGS)


def _message(tx_id: str, topic: str, body: bytes = b"{}") -> OutgoingMessage:
    return OutgoingMessage(tx_id, topic, body, None, (), None, {})


@pytest.mark.timeout(60)
def test_each_row_gets_an_outcome_that_names_its_fault(tmp_path: Path) -> None:
    with start_broker_lite(tmp_path / "broker", [*FAST_BROKER, "--no-auto-create-topics",
                                                 "--max-message-size", "4K"]) as broker:
        with Admin(broker.native) as admin:
            admin.create_topic("Known")
        publisher = BrokerLitePublisher(_outbox(broker.native))
        try:
            halves = publisher.send_halves([
                _message("tx-ok", "Known"), _message("tx-typo", "Knwon"),
                _message("tx-big", "Known", b"x" * 8192), _message("tx-later", "Known")])
            ok, typo, big, later = halves
            assert isinstance(ok, HalfStored) and isinstance(later, HalfStored)
            assert (ok.tx_id, ok.topic, later.tx_id) == ("tx-ok", "Known", "tx-later")
            assert ok.half_offset >= 0 and ok.transaction_id == "tx-ok"
            assert isinstance(typo, RowRefusedError) and typo.tx_id == "tx-typo"
            assert typo.kind is RowFault.CONFIG and not typo.retriable and "Knwon" in str(typo)
            assert isinstance(big, RowRefusedError) and big.kind is RowFault.ROW_INVALID
            assert typo.target == f"broker_lite at {broker.native}"
            ended = publisher.end_transactions([
                TxEnd(ok, "COMMIT"), TxEnd(later, "UNKNOWN"),
                TxEnd(HalfStored("tx-never-sent", "Known"), "COMMIT")])
        finally:
            publisher.close()
    committed, undecided, missing = ended
    assert isinstance(committed, TxEnded) and committed.commit_offset > ok.half_offset
    assert isinstance(undecided, LeftToCheckback) and undecided.tx_id == "tx-later"
    assert isinstance(missing, RowRefusedError) and missing.tx_id == "tx-never-sent"


@pytest.mark.timeout(60)
def test_an_unreachable_broker_fails_the_request_and_the_next_call_connects(
        tmp_path: Path) -> None:
    port = free_port()
    publisher = BrokerLitePublisher(_outbox(f"127.0.0.1:{port}"))
    try:
        with pytest.raises(BrokerUnreachableError):
            publisher.send_halves([_message("tx-1", "Anywhere")])
        with start_broker_lite(tmp_path / "broker", [*FAST_BROKER, "--port", str(port)]):
            [half] = publisher.send_halves([_message("tx-1", "Anywhere")])
            assert isinstance(half, HalfStored), half
            [ended] = publisher.end_transactions([TxEnd(half, "ROLLBACK")])
            assert ended == TxEnded("tx-1", -1)
    finally:
        publisher.close()


@pytest.mark.timeout(30)
def test_state_names_have_one_mapping_both_ways() -> None:
    from broker_lite.client import LocalTransactionState
    from outbox.models import STATES
    from outbox.targets.base import tx_state
    from outbox.targets.broker_lite import LOCAL_STATES, STATE_NAMES
    assert [tx_state(name) for name in STATES] == list(STATES)
    assert tx_state(None) == tx_state("PENDING") == "UNKNOWN"
    assert {STATE_NAMES[LOCAL_STATES[name]] for name in STATES} == set(STATES)
    assert LOCAL_STATES["COMMIT"] is LocalTransactionState.COMMIT_MESSAGE
