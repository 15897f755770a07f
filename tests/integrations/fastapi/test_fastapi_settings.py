"""FastAPI takes the settings Flask and Django take (one assembly, integrations/_assembly.py):
``mode="half_first"`` and ``max_body_size`` work through uvicorn and real HTTP."""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from integrations._assembly import OutboxOptions
from integrations.django.conf import DEFAULTS as DJANGO_DEFAULTS
from integrations.fastapi import Rocketbox
from integrations.flask._state import DEFAULTS as FLASK_DEFAULTS
from tests.integrations.fastapi.test_fastapi_integration import make_app, order_ids
from tests.integrations.integrations_support import (
    FAST_BROKER,
    Collector,
    broker_records,
    commit_counts,
    http,
    mentioned,
    row_ids,
)
from tests.support import BrokerLiteServer, start_broker_lite
from tests.support.asgi import async_database, serve_asgi


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server


def test_every_integration_takes_the_same_settings() -> None:
    names = [f.name for f in dataclasses.fields(OutboxOptions)]
    fastapi = set(inspect.signature(Rocketbox).parameters)
    assert [n for n in names if n not in fastapi] == []
    assert [n for n in names if f"ROCKETBOX_{n.upper()}" not in FLASK_DEFAULTS] == []
    assert [n for n in names if n.upper() not in DJANGO_DEFAULTS] == []


@pytest.mark.timeout(90)
def test_half_first_mode_and_max_body_size(tmp_path: Path, broker: BrokerLiteServer) -> None:
    topic = f"FastHalf{uuid.uuid4().hex[:8]}"
    _sync, async_url = async_database("aiosqlite", tmp_path, None)
    box = Rocketbox(async_url, broker=broker.native, celery_broker="", mode="half_first",
                    max_body_size=2000, engine_options={"connect_args": {"timeout": 30}})
    engine = box.base_outbox.engine
    try:
        assert box.outbox.mode == "half_first" and box.outbox.max_body_size == 2000
        with serve_asgi(make_app(box, topic=topic)) as server, \
                Collector(broker.native, topic, "fastapi-half") as got:
            address = server.address
            assert http(address, "POST", "/orders", {"id": 1, "item": "tea"})[0] == 201
            assert http(address, "POST", "/orders", {"id": 2, "item": "x", "explode": True})[0] \
                == 500
            [tx_id] = row_ids(engine)
            # no relay runs here: the decorator ended the half itself after the commit
            got.wait_for_keys([tx_id])
            with engine.connect() as conn:
                relayed = conn.execute(text("SELECT relayed_at FROM rocketbox_transaction"))
                assert relayed.scalar() is not None
            assert server.rocketbox_stalls() == [], server.report()  # the loop never waited
        # over max_body_size: refused at publish, naming the limit; nothing commits
        with serve_asgi(make_app(box, topic=topic, big_body=1000)) as server:
            assert http(server.address, "POST", "/orders", {"id": 3, "item": "big"})[0] == 500
        assert order_ids(engine) == {1}
        assert row_ids(engine) == {tx_id}
    finally:
        box.base_outbox.engine.dispose()
        box._publishers.close()
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1}
    assert mentioned(records) == {tx_id}  # the failed views sent no half
