"""The audit finds tampering on the NATS target, from the stream's own export.

Real rows are relayed to a real nats-server; then the outbox and the stream
disagree in three ways: a relayed row's body changed in the database
(``payload_mismatch``), a row marked relayed whose message was never sent
(``lost``), and a message in the stream no row committed (``phantom``).
``rocketbox broker-export`` reads the stream (``STREAM:SEQ`` positions) and
``rocketbox audit --broker-export`` (Spark local) reports exactly those three.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from outbox import Outbox, Relay
from outbox.broker_export import read_export
from outbox.models import transaction_table as t
from outbox.publish import publish
from outbox.targets.choose import publisher_for
from tests.support.nats_server import NatsServer
from tests.support.sqlite import sqlite_outbox_engine
from tests.targets.nats.nats_support import create_stream, fast_relay, run

pytestmark = pytest.mark.spark
N = 20


@pytest.mark.timeout(600)
def test_the_audit_over_the_streams_export_finds_changed_lost_and_phantom(
        nats_server: NatsServer, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from spark.audit_job import main as audit_main

    relay = fast_relay()
    db = tmp_path / "outbox.sqlite"
    engine = sqlite_outbox_engine(db)
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=relay)
    create_stream(nats_server.url, "AUDITED", ["Audited"], relay)
    with Session(engine) as session, session.begin():
        ids = [publish(session, "Audited", {"i": i}, outbox=outbox,
                       message_group=f"g{i % 3}" if i % 2 else None) for i in range(N)]
    publisher = publisher_for(outbox)
    try:
        assert Relay(outbox, publisher).drain().relayed == N
    finally:
        publisher.close()

    changed, phantom = ids[7], uuid.uuid4().hex.upper()
    with Session(engine) as session, session.begin():  # committed after the relay ran...
        never_sent = publish(session, "Audited", {"i": "ghost"}, outbox=outbox)
    with engine.begin() as conn:
        conn.execute(update(t).where(t.c.tx_id == changed).values(body=b'{"i":"forged"}'))
        # ... and marked relayed though its message was never published
        conn.execute(update(t).where(t.c.tx_id == never_sent).values(
            relayed_at=datetime.now(UTC)))

    async def stray(js: object) -> None:  # a message no row committed
        await js.publish("Audited", b'{"i":"stray"}',  # type: ignore[attr-defined]
                         headers={"Nats-Msg-Id": phantom})

    run(nats_server.url, stray)

    export = tmp_path / "nats.jsonl"
    done = subprocess.run([sys.executable, "-m", "outbox", "broker-export", "--broker",
                           nats_server.url, "--out", str(export), "--source", "AUDITED"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    messages = list(read_export(export))
    assert sorted(m.tx_id for m in messages) == sorted([*ids, phantom])
    assert [m.position for m in messages] == [f"AUDITED:{n}" for n in range(1, N + 2)]
    with engine.connect() as conn:  # the relay recorded where each row went
        positions = {tx: at for tx, at in conn.execute(
            select(t.c.tx_id, t.c.broker_position).where(t.c.tx_id.in_(ids)))}
    assert positions == {m.tx_id: m.position for m in messages if m.tx_id in positions}

    summary = tmp_path / "summary.json"
    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{db}", "--broker-export", str(export),
                       "--grace", "0", "--slo", "600", "--stuck-after", "600",
                       "--json", str(summary), "--html", str(tmp_path / "report.html"),
                       "--quiet"])
    document = json.loads(summary.read_text())
    found = {d["tx_id"]: d["category"] for d in document["divergent_ids"]}
    assert found == {changed: "payload_mismatch", never_sent: "lost", phantom: "phantom"}
    assert document["divergent"] == 3 and code == 1
    engine.dispose()
