"""Seeding divergences on purpose: status rows by SQL, broker records by MessageStore.put.

``BrokerSeed`` writes exactly what ``broker_lite.core.transactions`` writes
(halves, commit records, op records, discards), straight into a store, so a
test can make the broker say anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, insert, text

from broker_lite.core.topics import HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.core.transactions import TX_STATE
from broker_lite.storage import MessageStore, MessageToStore, PutResult, StoreConfig, TxType
from broker_lite.storage.properties import (
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TRAN_MSG,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    UNIQ_KEY,
)
from outbox.models import metadata
from outbox.models import transaction_table as t

GROUP = "audit-pg"


@dataclass
class Half:
    tx_id: str
    topic: str
    body: bytes
    put: PutResult
    props: dict[str, str]
    copies: list[PutResult] = field(default_factory=list)


@dataclass
class BrokerSeed:
    """Writes transaction records as the broker's TransactionService does (RocketMQ's model)."""

    store: MessageStore
    halves: dict[str, Half] = field(default_factory=dict)

    def half(self, tx_id: str, topic: str, body: bytes) -> Half:
        props = {TAGS: "t", REAL_TOPIC: topic, REAL_QID: "0", PGROUP: GROUP, TRAN_MSG: "true",
                 TRANSACTION_ID: tx_id, UNIQ_KEY: tx_id}
        put = self.store.put(MessageToStore(topic=HALF_TOPIC, queue_id=0, body=body,
                                            properties=props))  # transaction bits cleared
        self.halves[tx_id] = Half(tx_id, topic, body, put, props, [put])
        return self.halves[tx_id]

    def commit(self, tx_id: str, *, op: bool = True) -> PutResult:
        half = self.halves[tx_id]
        props = {k: v for k, v in half.props.items() if k not in (TRAN_MSG, REAL_TOPIC, REAL_QID)}
        put = self.store.put(MessageToStore(topic=half.topic, queue_id=0, body=half.body,
                                            sysflag=TxType.COMMIT, properties=props,
                                            prepared_tx_offset=half.put.physical_offset))
        if op:
            self.op(tx_id, "COMMIT")
        return put

    def check(self, tx_id: str, times: int) -> PutResult:
        """A renewed copy of the half, as each check re-puts one."""
        half = self.halves[tx_id]
        props = {**half.props, TRANSACTION_CHECK_TIMES: str(times), TX_STATE: "CHECK"}
        put = self.store.put(MessageToStore(topic=HALF_TOPIC, queue_id=0, body=half.body,
                                            properties=props))
        half.copies.append(put)
        return put

    def op(self, tx_id: str, state: str, **extra: str) -> PutResult:
        """An op record removing the half (a ``CHECK`` renews the half instead)."""
        half = self.halves[tx_id]
        if state == "CHECK":
            return self.check(tx_id, int(extra.get(TRANSACTION_CHECK_TIMES, "1")))
        props = {TAGS: "d", TRANSACTION_ID: tx_id, TX_STATE: state, **extra}
        return self.store.put(MessageToStore(topic=OP_TOPIC, body=b"%d," % half.put.queue_offset,
                                             properties=props))

    def rollback(self, tx_id: str) -> PutResult:
        return self.op(tx_id, "ROLLBACK")

    def discard(self, tx_id: str, checks: int = 2) -> PutResult:
        half = self.halves[tx_id]
        for n in range(1, checks + 1):
            self.check(tx_id, n)
        props = dict(half.props)
        props[TRANSACTION_CHECK_TIMES] = str(checks)
        return self.store.put(MessageToStore(topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0,
                                             body=half.body, properties=props))

    def normal(self, topic: str, body: bytes) -> PutResult:
        return self.store.put(MessageToStore(topic=topic, body=body, properties={TAGS: "n"}))


@contextmanager
def broker_seed(data_dir: Path, segment_size: int = 64 * 1024) -> Iterator[BrokerSeed]:
    """A MessageStore with small segments (so files roll over), closed on exit."""
    store = MessageStore(StoreConfig(data_dir=data_dir, segment_size=segment_size))
    try:
        yield BrokerSeed(store)
    finally:
        store.close()


def status_row(tx_id: str, topic: str, body: bytes, state: str, created_at: datetime,
               seq: int, **relay: Any) -> dict[str, Any]:
    """A ``rocketbox_transaction`` row as ``outbox.publish`` writes it.

    ``relay``: the relay's bookkeeping as it would have written it since
    (``relayed_at``, ``attempts``, ``parked``, ``last_error``...).
    """
    return dict(tx_id=tx_id, seq=seq, producer_group=GROUP, topic=topic, tag="t", keys=None,
                message_group=None, body=body, headers=None, state=state,
                created_at=created_at, next_attempt_at=created_at, **relay)


def relayed_row(tx_id: str, topic: str, body: bytes, created_at: datetime,
                seq: int) -> dict[str, Any]:
    """A COMMIT row the relay recorded as relayed (a moment after its commit)."""
    return status_row(tx_id, topic, body, "COMMIT", created_at, seq,
                      relayed_at=created_at + timedelta(milliseconds=5))


def write_status(engine: Engine, rows: list[dict[str, Any]]) -> None:
    metadata.create_all(engine)
    shapes: dict[frozenset[str], list[dict[str, Any]]] = {}
    for row in rows:  # an executemany takes its columns from the first row: one per shape
        shapes.setdefault(frozenset(row), []).append(row)
    with engine.begin() as conn:
        for same in shapes.values():
            conn.execute(insert(t), same)


def sqlite_engine(path: Path) -> Engine:
    return create_engine(f"sqlite:///{path}")


def drop_status(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS rocketbox_transaction"))


def utcnow() -> datetime:
    return datetime.now(UTC)


def ago(seconds: float) -> datetime:
    return utcnow() - timedelta(seconds=seconds)
