"""One check-back rule set for both targets (docs/targets.md, "One check-back rule set").

The same half asked about by broker_lite's responder and by RocketMQ's
checker gets the same ageing (the broker's store time, so a producer whose
clock is behind does not make a young half look old), the same
``rocketbox_checkback_total`` count and the same log of a malformed xid;
RocketMQ's own per-half rules still come first. The messages are the
clients' own types, decoded as the brokers send them; the status table is a
real SQLite database.
"""

from __future__ import annotations

import logging
import time
import zlib
from pathlib import Path

import pytest
from rocketmq import Message as RocketMQMessage
from rocketmq.grpc_protocol import DigestType, Encoding, definition_pb2
from sqlalchemy import Engine, create_engine, update
from sqlalchemy.orm import Session

from broker_lite.client import LocalTransactionState, ReceivedMessage
from outbox import PG_XID_PROPERTY, Outbox, metadata, metrics, publish
from outbox.checkback_runner import answer_check
from outbox.models import transaction_table as t
from outbox.targets.base import TX_ID_PROPERTY
from outbox.targets.rocketmq_checkback import StatusTableChecker

#: the producer's clock is this far behind the broker's (seconds)
SKEW = 600.0
LOCAL_TX_TIMEOUT = 60.0


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'rules.sqlite'}")
    metadata.create_all(engine)
    return engine


def _count(state: str) -> float:
    value = metrics.registry().get_sample_value("rocketbox_checkback_total", {"state": state})
    return 0.0 if value is None else value


def _broker_lite_half(tx_id: str, *, born_ms: int, store_ms: int,
                      xid: str | None) -> ReceivedMessage:
    properties = {TX_ID_PROPERTY: tx_id} | ({PG_XID_PROPERTY: xid} if xid else {})
    return ReceivedMessage("Orders", b"{}", None, (), properties, f"half-{tx_id}", 0, 0, 0, 0,
                           born_ms, store_ms, "RMQ_SYS_TRANS_HALF_TOPIC",
                           transaction_id=tx_id, check_times=1)


def _rocketmq_half(tx_id: str, *, born_ms: int, store_ms: int,
                   xid: str | None) -> RocketMQMessage:
    wire = definition_pb2.Message()
    wire.topic.name = "Orders"
    wire.body = b"{}"
    wire.system_properties.message_id = f"half-{tx_id}"
    wire.system_properties.born_timestamp.FromMilliseconds(born_ms)
    wire.system_properties.store_timestamp.FromMilliseconds(store_ms)
    wire.system_properties.body_encoding = Encoding.IDENTITY
    wire.system_properties.body_digest.type = DigestType.CRC32
    wire.system_properties.body_digest.checksum = format(zlib.crc32(wire.body), "X")
    wire.user_properties[TX_ID_PROPERTY] = tx_id
    if xid:
        wire.user_properties[PG_XID_PROPERTY] = xid
    return RocketMQMessage().fromProtobuf(wire)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", ["broker_lite", "rocketmq"])
def test_a_half_is_aged_by_store_time_counted_and_a_bad_xid_logged(
        sqlite_engine: Engine, target: str, caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox(engine=sqlite_engine, local_tx_timeout=LOCAL_TX_TIMEOUT)
    now_ms = int(time.time() * 1000)
    # stored 5 s ago by the broker; born "10 minutes ago" by a producer whose clock is behind
    born_ms, store_ms = now_ms - int((SKEW + 5) * 1000), now_ms - 5000
    checker = StatusTableChecker(outbox)

    def ask(tx_id: str, xid: str | None = None) -> str:
        if target == "broker_lite":
            half = _broker_lite_half(tx_id, born_ms=born_ms, store_ms=store_ms, xid=xid)
            return answer_check(outbox, half)[1].state
        checker.check(_rocketmq_half(tx_id, born_ms=born_ms, store_ms=store_ms, xid=xid))
        [(state, _)] = [(s, n) for s, n in checker.answered.items() if n]
        checker.answered.update(dict.fromkeys(checker.answered, 0))
        return state

    unknown_before = _count("UNKNOWN")
    with caplog.at_level(logging.INFO, logger="rocketbox.checker"):
        # no row, no usable xid: the age decides, and the age is the store time's (5 s)
        assert ask("no-row-yet", xid="not-a-number") == "UNKNOWN"
    assert _count("UNKNOWN") == unknown_before + 1
    assert "carries a malformed ROCKETBOX_PG_XID: 'not-a-number'" in caplog.text
    assert "check-back no-row-yet half half-no-row-yet" in caplog.text

    # the row's state decides once there is one, by the same rule on both targets
    with Session(sqlite_engine) as session, session.begin():
        tx_id = publish(session, "Orders", {}, outbox=outbox)
    with sqlite_engine.begin() as conn:  # the half the relay recorded (RocketMQ's rule)
        conn.execute(update(t).where(t.c.tx_id == tx_id).values(half_message_id=f"half-{tx_id}"))
    commits_before = _count("COMMIT")
    assert ask(tx_id) == "COMMIT"
    assert _count("COMMIT") == commits_before + 1


@pytest.mark.timeout(60)
def test_rocketmq_keeps_its_own_rules_first(sqlite_engine: Engine) -> None:
    """A half the row did not record is a duplicate on RocketMQ: ROLLBACK, counted."""
    outbox = Outbox(engine=sqlite_engine)
    with Session(sqlite_engine) as session, session.begin():
        tx_id = publish(session, "Orders", {}, outbox=outbox)
    with sqlite_engine.begin() as conn:
        conn.execute(update(t).where(t.c.tx_id == tx_id).values(half_message_id="the-first"))
    now_ms = int(time.time() * 1000)
    checker = StatusTableChecker(outbox)
    rollbacks = _count("ROLLBACK")
    checker.check(_rocketmq_half(tx_id, born_ms=now_ms, store_ms=now_ms, xid=None))
    assert checker.answered["ROLLBACK"] == 1
    assert _count("ROLLBACK") == rollbacks + 1
    # broker_lite stores one half per tx_id: no such rule, the row's state answers
    half = _broker_lite_half(tx_id, born_ms=now_ms, store_ms=now_ms, xid=None)
    assert answer_check(outbox, half)[0] is LocalTransactionState.COMMIT_MESSAGE
