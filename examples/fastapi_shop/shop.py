"""The order service: ``POST /orders`` writes an order and publishes ``OrderCreated``.

The same service as ``examples/flask_shop``, with async views: the order row
(through an ``AsyncSession``) and the message commit in one transaction
(``@rocketbox.transactional_message``). An unknown item answers 422 and an
order over the stock limit raises ``HTTPException(409)``; either way the
order is rolled back and no message is ever sent.

The body is checked before the view runs (``OrderIn``: the rules of
``examples/flask_shop/order_input.py``): a bad one answers 422, a body over
16 KiB 413, each with a JSON error naming the field and never echoing the
value; no user input makes a 500.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from examples.fastapi_shop.settings import shop_settings
from examples.flask_shop.order_input import (
    MAX_BODY_BYTES,
    MAX_ITEM_LENGTH,
    MAX_QTY_ASKED,
    MAX_REF_LENGTH,
)
from examples.flask_shop.orders import CATALOGUE, MAX_QTY, TOPIC, OrderColumns
from integrations.fastapi import Rocketbox


class Base(DeclarativeBase):
    pass


class Order(OrderColumns, Base):
    """An order (``examples/flask_shop/orders.py`` has its columns)."""


class OrderIn(BaseModel):
    """An order as asked: strict types (``"2"``, ``1.5`` and ``true`` are not a qty)."""

    model_config = ConfigDict(extra="ignore")

    item: StrictStr = Field(min_length=1, max_length=MAX_ITEM_LENGTH)
    qty: StrictInt = Field(1, ge=1, le=MAX_QTY_ASKED)
    ref: StrictStr | None = Field(None, min_length=1, max_length=MAX_REF_LENGTH)


class BodyLimit:
    """413 for a request body over ``MAX_BODY_BYTES``: by its Content-Length, or as it
    arrives (chunked); a body within the limit is read here and handed on whole."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            await _too_large()(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > MAX_BODY_BYTES:
                await _too_large()(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _too_large() -> JSONResponse:
    return JSONResponse({"error": f"an order is at most {MAX_BODY_BYTES} bytes"},
                        status_code=413)


rocketbox = Rocketbox(**shop_settings())
app = FastAPI(title="shop", lifespan=rocketbox.lifespan)
app.add_middleware(BodyLimit)
Session = Annotated[AsyncSession, Depends(rocketbox.session)]


#: pydantic's error types about the body as a whole, and what the shop says instead
_WHOLE_BODY = {"model_attributes_type": "the body must be a JSON object",
               "dict_type": "the body must be a JSON object",
               "json_invalid": "the body is not JSON"}


@app.exception_handler(RequestValidationError)
async def bad_order(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """One JSON error naming the field, without the value (pydantic's would echo it)."""
    first = exc.errors()[0]
    kind = first.get("type")
    where = [str(part) for part in first.get("loc", ()) if part != "body"]
    field = ".".join(where) if where and kind not in _WHOLE_BODY else None
    message = _WHOLE_BODY.get(kind, str(first.get("msg", "invalid")))
    error: dict[str, Any] = {"error": f"{field}: {message}" if field else message}
    if field:
        error["field"] = field
    return JSONResponse(error, status_code=422)


@app.exception_handler(StarletteHTTPException)
async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """``{"error": ...}`` as every other refusal (FastAPI's own says ``detail``)."""
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                        headers=exc.headers)


@app.exception_handler(IntegrityError)
async def taken_ref(_request: Request, _exc: IntegrityError) -> JSONResponse:
    return JSONResponse({"error": "an order with this ref exists already", "field": "ref"},
                        status_code=409)


@app.post("/orders", status_code=201)
@rocketbox.transactional_message(topic=TOPIC, tag="OrderCreated", body=lambda rv: rv,
                                 keys=lambda rv: rv["ref"])
async def create_order(data: OrderIn, session: Session) -> Any:
    order = Order(ref=data.ref or uuid.uuid4().hex, item=data.item, qty=data.qty,
                  created_at=datetime.now(UTC))
    session.add(order)
    await session.flush()  # the order has its id; the transaction is still open
    if order.item not in CATALOGUE:
        return JSONResponse({"error": f"unknown item {order.item!r}", "ref": order.ref},
                            status_code=422)
    if order.qty > MAX_QTY:
        raise HTTPException(409, f"at most {MAX_QTY} {order.item} per order")
    return {"id": order.id, "ref": order.ref, "item": order.item, "qty": order.qty,
            "price": CATALOGUE[order.item] * order.qty}


@app.get("/orders/{ref}")
async def get_order(ref: str, session: Session) -> Any:
    order = (await session.execute(select(Order).where(Order.ref == ref))).scalar()
    if order is None:
        return JSONResponse({"error": "no such order"}, status_code=404)
    return {"id": order.id, "ref": order.ref, "item": order.item, "qty": order.qty}


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}
