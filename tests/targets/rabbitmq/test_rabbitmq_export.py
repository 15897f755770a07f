"""The RabbitMQ export (a stream re-read from its first offset) and the audit over it.

Real parts: PostgreSQL or SQLite for the outbox, a rabbitmq-server node, the
relay with the RabbitMQ target, ``rocketbox broker-export`` and the Spark
audit (``--broker-export``) on the export it wrote.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings, publish
from outbox.broker_export import body_sha256, read_export
from outbox.cli import main as rocketbox
from outbox.errors import ConfigurationError
from outbox.models import transaction_table as t
from outbox.targets.choose import export_messages, publisher_for
from tests.support.publishers import drain
from tests.support.rabbitmq_server import RabbitMQServer
from tests.support.sqlite import sqlite_outbox_engine
from tests.targets.rabbitmq.rabbit_support import Consumer, declare, queue_depth


async def _route(url: str, exchange: str, queue: str, stream: str) -> None:
    """A topic exchange sending each topic to its queue, and everything to an audit stream."""
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel()
        shop = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC,
                                              durable=True)
        consumers = await channel.declare_queue(queue, durable=True,
                                                arguments={"x-queue-type": "quorum"})
        audit = await channel.declare_queue(stream, durable=True,
                                            arguments={"x-queue-type": "stream"})
        await consumers.bind(shop, routing_key=queue)
        await audit.bind(shop, routing_key="#")


def _bodies(engine: Engine) -> dict[str, bytes]:
    with engine.connect() as conn:
        return {r.tx_id: bytes(r.body) for r in conn.execute(select(t.c.tx_id, t.c.body))}


@pytest.mark.timeout(180)
def test_an_exchange_routes_each_row_to_its_queue_and_the_export_reads_the_audit_stream(
        pg_engine: Engine, rabbitmq_server: RabbitMQServer, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    exchange, queue, stream = f"shop{suffix}", f"Orders{suffix}", f"audit{suffix}"
    asyncio.run(_route(rabbitmq_server.url, exchange, queue, stream))
    outbox = Outbox(engine=pg_engine, broker=f"{rabbitmq_server.url}?exchange={exchange}")
    with Session(pg_engine) as session, session.begin():
        ids = [publish(session, queue, {"i": i}, outbox=outbox) for i in range(3)]
    assert drain(outbox, publisher_for(outbox)).relayed == 3
    with pg_engine.connect() as conn:
        assert set(conn.execute(select(t.c.broker_position)).scalars()) == {"QUEUE"}

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: c.inbox.counts["processed"] >= 3, timeout=60)
    assert sorted(consumer.deliveries) == sorted(ids)

    out = tmp_path / "export.jsonl"
    code = rocketbox(["broker-export", "--broker", rabbitmq_server.url, "--out", str(out),
                      "--source", stream])
    assert code == 0
    exported = list(read_export(out))
    bodies = _bodies(pg_engine)
    assert [m.tx_id for m in exported] == ids  # in publish order
    assert [m.position for m in exported] == [f"{stream}:{n}" for n in range(3)]
    assert all(m.destination == stream for m in exported)
    assert all(m.body_sha256 == body_sha256(bodies[m.tx_id]) for m in exported)
    assert all(m.time_ms > 0 for m in exported)
    # read again: a stream is not consumed by a read
    assert export_messages(outbox, tmp_path / "again.jsonl", source=stream) == 3


@pytest.mark.timeout(120)
def test_exporting_a_quorum_queue_is_refused_by_name_and_takes_nothing_from_it(
        outbox: Outbox, pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer,
        tmp_path: Path) -> None:
    with Session(pg_engine) as session, session.begin():
        publish(session, queue, {"i": 1}, outbox=outbox)
    drain(outbox, publisher_for(outbox))
    with pytest.raises(ConfigurationError, match="is not a stream") as caught:
        export_messages(outbox, tmp_path / "x.jsonl", source=queue)
    assert caught.value.setting == "source"
    with pytest.raises(ConfigurationError, match="has no queue 'nosuch'"):
        export_messages(outbox, tmp_path / "x.jsonl", source="nosuch")
    with pytest.raises(ConfigurationError, match="--source: name the stream"):
        export_messages(outbox, tmp_path / "x.jsonl", source=None)
    assert queue_depth(rabbitmq_server.url, queue) == 1  # still there for its consumers
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_the_audit_on_the_export_finds_a_changed_row_and_a_row_marked_relayed_but_never_sent(
        rabbitmq_server: RabbitMQServer, tmp_path: Path) -> None:
    stream = f"Audit{uuid.uuid4().hex[:8]}"
    declare(rabbitmq_server.url, stream, "stream")
    db = tmp_path / "outbox.sqlite"
    engine = sqlite_outbox_engine(db)
    outbox = Outbox(engine=engine, broker=rabbitmq_server.url,
                    relay=RelaySettings(broker_timeout=30.0))
    try:
        with Session(engine) as session, session.begin():
            ids = [publish(session, stream, {"i": i}, outbox=outbox) for i in range(10)]
        with Session(engine) as session, session.begin():
            never_sent = publish(session, stream, {"i": "lost"}, outbox=outbox)
        with engine.begin() as conn:  # marked relayed, but no relay ever sent it
            conn.execute(update(t).where(t.c.tx_id == never_sent)
                         .values(relayed_at=t.c.created_at))
        assert drain(outbox, publisher_for(outbox)).relayed == 10
        changed = ids[4]
        with engine.begin() as conn:  # the row changed in the database after the relay
            conn.execute(update(t).where(t.c.tx_id == changed).values(body=b'{"i":"forged"}'))
        export = tmp_path / "export.jsonl"
        assert export_messages(outbox, export, source=stream) == 10
    finally:
        engine.dispose()
    summary = tmp_path / "summary.json"
    from spark.audit_job import main as audit_main

    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{db}", "--broker-export", str(export),
                       "--grace", "0", "--slo", "600", "--stuck-after", "600",
                       "--out", str(tmp_path / "divergent"), "--json", str(summary),
                       "--html", str(tmp_path / "report.html"), "--quiet"])
    document: dict[str, Any] = json.loads(summary.read_text())
    counts = {k: v for k, v in document["counts"].items() if v}
    assert counts == {"ok": 9, "lost": 1, "payload_mismatch": 1}
    found = {d["tx_id"] for d in document["divergent_ids"]}
    assert found == {never_sent, changed}
    assert code == 1
