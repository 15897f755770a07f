"""The order service: ``POST /orders`` writes an order and publishes ``OrderCreated``.

The order row and the message commit in one transaction
(``@transactional_message``): an unknown item answers 422 and an order over
the stock limit raises, and either way the order is rolled back and no
message is ever sent.

The body is checked before anything is written (``order_input.py``): a bad
one answers 400, 413 or 422 with a JSON error naming the field; no user
input makes a 500. Errors Flask raises itself (404, 405, 413) answer JSON too.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from flask import Flask, jsonify, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase
from werkzeug.exceptions import HTTPException

from examples.flask_shop.order_input import MAX_BODY_BYTES, BadOrder, parse_order_body
from examples.flask_shop.orders import CATALOGUE, MAX_QTY, TOPIC, OrderColumns
from integrations.flask import Rocketbox, transactional_message


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
rocketbox = Rocketbox()


class Order(OrderColumns, db.Model):  # type: ignore[name-defined,misc]
    """An order (``orders.py`` has its columns)."""


class OutOfStock(Exception):
    """More than ``MAX_QTY`` of one item in one order."""


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """The shop; ``config`` needs at least ``SQLALCHEMY_DATABASE_URI`` and ``ROCKETBOX_BROKER``."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # larger bodies: 413 before reading
    app.config.update(config or {})
    db.init_app(app)
    app.config.setdefault("ROCKETBOX_DATABASE", db)
    rocketbox.init_app(app)

    @app.errorhandler(OutOfStock)
    def out_of_stock(exc: OutOfStock) -> tuple[dict[str, str], int]:
        return {"error": str(exc)}, 409

    @app.errorhandler(BadOrder)
    def bad_order(exc: BadOrder) -> tuple[dict[str, Any], int]:
        return exc.body(), exc.status

    @app.errorhandler(IntegrityError)
    def taken_ref(exc: IntegrityError) -> tuple[dict[str, str], int]:
        return {"error": "an order with this ref exists already", "field": "ref"}, 409

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[dict[str, str], int]:
        return {"error": exc.description or exc.name}, exc.code or 500

    @app.post("/orders")
    @transactional_message(topic=TOPIC, tag="OrderCreated", body=lambda rv: rv[0],
                           keys=lambda rv: rv[0]["ref"])
    def create_order() -> tuple[dict[str, Any], int]:
        asked = parse_order_body(request.get_data(cache=False))  # BadOrder: 400/413/422
        order = Order(ref=asked.ref or uuid.uuid4().hex, item=asked.item, qty=asked.qty,
                      created_at=datetime.now(UTC))
        db.session.add(order)
        db.session.flush()  # the order has its id; the transaction is still open
        if order.item not in CATALOGUE:
            return {"error": f"unknown item {order.item!r}", "ref": order.ref}, 422
        if order.qty > MAX_QTY:
            raise OutOfStock(f"at most {MAX_QTY} {order.item} per order")
        return {"id": order.id, "ref": order.ref, "item": order.item, "qty": order.qty,
                "price": CATALOGUE[order.item] * order.qty}, 201

    @app.get("/orders/<ref>")
    def get_order(ref: str) -> Any:
        order = db.session.execute(db.select(Order).where(Order.ref == ref)).scalar()
        if order is None:
            return {"error": "no such order"}, 404
        return jsonify(id=order.id, ref=order.ref, item=order.item, qty=order.qty)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
