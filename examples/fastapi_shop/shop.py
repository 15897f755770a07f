"""The order service: ``POST /orders`` writes an order and publishes ``OrderCreated``.

The same service as ``examples/flask_shop``, with async views: the order row
(through an ``AsyncSession``) and the message commit in one transaction
(``@rocketbox.transactional_message``). An unknown item answers 422 and an
order over the stock limit raises ``HTTPException(409)``; either way the
order is rolled back and no message is ever sent.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import DeclarativeBase

from examples.fastapi_shop.settings import shop_settings
from examples.flask_shop.orders import CATALOGUE, MAX_QTY, TOPIC, OrderColumns
from integrations.fastapi import Rocketbox


class Base(DeclarativeBase):
    pass


class Order(OrderColumns, Base):
    """An order (``examples/flask_shop/orders.py`` has its columns)."""


class OrderIn(BaseModel):
    item: str
    qty: int = 1
    ref: str | None = None


rocketbox = Rocketbox(**shop_settings())
app = FastAPI(title="shop", lifespan=rocketbox.lifespan)
Session = Annotated[AsyncSession, Depends(rocketbox.session)]


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
