"""bench/decorator.py's Flask app: the four routes, and werkzeug serving them in a thread.

``/bare``, ``/row`` (the outbox row by hand, its own ``INSERT``: :data:`ROW_SQL`),
``/ride`` (the row by hand in the ``COMMIT``'s query: :data:`RIDE_SQL`) and
``/decorated`` (``@transactional_message``), all doing the same business
write into ``orders`` (:func:`orders_table`). :func:`serve` runs werkzeug's
threaded server (TCP_NODELAY) on a free loopback port.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "RIDE_SQL",
    "ROW_SQL",
    "make_app",
    "orders_table",
    "ride_statement",
    "row_params",
    "serve",
    "stop_wsgi",
]

#: the ``/row`` route's hand-written outbox row (the columns ``publish()`` sets)
ROW_SQL = ("INSERT INTO rocketbox_transaction (tx_id, seq, producer_group, topic, tag, keys, "
           "body, state, created_at, next_attempt_at, pg_xid) VALUES (%(tx_id)s, "
           "nextval('rocketbox_transaction_seq'), %(group)s, %(topic)s, %(tag)s, %(keys)s, "
           "%(body)s, 'COMMIT', %(now)s, %(now)s, pg_current_xact_id()::text::bigint)")
#: the ``/ride`` route's row, sent with the COMMIT (tx_id, keys and body are hex)
RIDE_SQL = ("SELECT rocketbox_publish('{tx_id}', 'rocketbox', 'Orders', 'OrderCreated', "
            "'{keys}', NULL, decode('{body}', 'hex'), NULL, 'COMMIT', '{now}'); COMMIT")


def row_params(answer: dict[str, Any]) -> dict[str, Any]:
    """:data:`ROW_SQL`'s parameters for a route's ``answer``: a new tx_id, the JSON body."""
    return {"tx_id": uuid.uuid4().hex.upper(), "group": "rocketbox", "topic": "Orders",
            "tag": "OrderCreated", "keys": answer["ref"], "body": _json(answer),
            "now": datetime.now(UTC)}


def ride_statement(answer: dict[str, Any]) -> str:
    """:data:`RIDE_SQL` for a route's ``answer``: a new tx_id, the JSON body in hex."""
    return RIDE_SQL.format(tx_id=uuid.uuid4().hex.upper(), keys=answer["ref"],
                           body=_json(answer).hex(), now=datetime.now(UTC).isoformat())


def _json(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode()


def make_app(engine: Any) -> Any:
    from flask import Flask, request
    from sqlalchemy import insert
    from sqlalchemy.orm import sessionmaker

    from integrations.flask import Rocketbox, transactional_message

    orders = orders_table()
    app = Flask("bench_decorator")
    app.config.update(ROCKETBOX_DATABASE=engine, ROCKETBOX_CELERY_BROKER="",
                      ROCKETBOX_BROKER="127.0.0.1:1")
    rocketbox = Rocketbox(app)
    sessions = sessionmaker(engine)

    def write_order(session: Any) -> dict[str, Any]:
        """The business write all three routes do; returns the response body."""
        data = request.get_json(force=True)
        ref = uuid.uuid4().hex
        order_id = session.execute(insert(orders).values(
            ref=ref, item=str(data["item"]), qty=int(data["qty"]),
            created_at=datetime.now(UTC)).returning(orders.c.id)).scalar_one()
        return {"id": order_id, "ref": ref}

    @app.post("/bare")
    def bare() -> tuple[dict[str, Any], int]:
        with sessions() as session:
            answer = write_order(session)
            session.commit()
        return answer, 201

    @app.post("/row")
    def row() -> tuple[dict[str, Any], int]:
        with sessions() as session:
            answer = write_order(session)
            session.connection().exec_driver_sql(ROW_SQL, row_params(answer))
            session.commit()
        return answer, 201

    @app.post("/ride")
    def ride() -> tuple[dict[str, Any], int]:
        with sessions() as session:
            answer = write_order(session)
            raw = session.connection().connection.dbapi_connection
            assert raw is not None  # a checked-out connection holds its driver connection
            raw.execute(ride_statement(answer), prepare=False)
            session.commit()  # psycopg finds the server idle: nothing more is sent
        return answer, 201

    @app.post("/decorated")
    @transactional_message(topic="Orders", tag="OrderCreated", body=lambda rv: rv[0],
                           keys=lambda rv: rv[0]["ref"])
    def decorated() -> tuple[dict[str, Any], int]:
        return write_order(rocketbox.session), 201

    return app


def orders_table() -> Any:
    from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table

    global _ORDERS
    if _ORDERS is None:
        _ORDERS = Table("orders", MetaData(),
                        Column("id", Integer, primary_key=True),
                        Column("ref", String(64), nullable=False, unique=True),
                        Column("item", String(64), nullable=False),
                        Column("qty", Integer, nullable=False),
                        Column("created_at", DateTime(timezone=True), nullable=False))
    return _ORDERS


_ORDERS: Any = None


def serve(app: Any) -> tuple[Any, int, threading.Thread]:
    from werkzeug.serving import WSGIRequestHandler, make_server

    from tests.support.servers import free_port

    class Handler(WSGIRequestHandler):
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"

        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=Handler)
    thread = threading.Thread(target=server.serve_forever, name="wsgi", daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    return server, port, thread


def stop_wsgi(server: Any, thread: threading.Thread) -> None:
    server.shutdown()
    thread.join(5)
