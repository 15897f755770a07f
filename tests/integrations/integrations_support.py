"""Helpers shared by the Flask and Django integration tests.

* :func:`serve_wsgi`: a real HTTP server (werkzeug's ``make_server``) on a
  free loopback port, in a thread, for any WSGI app;
* :func:`http`: one request through :mod:`http.client`;
* :func:`relay_all`: relay every due row, as the Celery worker would;
* :class:`Collector`: a broker_lite push consumer that keeps what it gets;
* :func:`broker_records` / :func:`commit_counts`: what the broker's commit
  log holds (``broker-lite inspect``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from werkzeug.serving import make_server

from outbox import Outbox
from outbox.models import transaction_table as t
from tests.support.commitlog import broker_records as broker_records  # re-exported
from tests.support.commitlog import commit_counts as commit_counts  # re-exported
from tests.support.http import http as http  # re-exported for the tests
from tests.support.publishers import drain
from tests.support.recorder import Collector as Collector  # re-exported

FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3")


@contextlib.contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1:<free port> in a thread; yields ``host:port``."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="wsgi", daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def relay_all(outbox: Outbox) -> int:
    """Relay every due row now; returns how many were relayed."""
    return drain(outbox).relayed


def row_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id)).scalars())


def mentioned(records: list[dict[str, Any]]) -> set[str]:
    """Every transaction id any record (half, op, commit) carries."""
    return {r["transaction_id"] for r in records if r.get("transaction_id")}


def queued_relay_tasks(queue: Path) -> list[Any]:
    """The ``tx_ids`` argument of every task waiting in kombu's SQLAlchemy queue file."""
    import base64

    from sqlalchemy import create_engine, text

    if not queue.exists():
        return []
    engine = create_engine(f"sqlite:///{queue}")
    try:
        with engine.connect() as conn:
            payloads = conn.execute(text("SELECT payload FROM kombu_message")).scalars().all()
    finally:
        engine.dispose()
    out = []
    for payload in payloads:
        message = json.loads(payload)
        out.append(json.loads(base64.b64decode(message["body"]))[0][0])
    return out
