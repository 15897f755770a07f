"""The shop's orders: the ``shop_order`` table, the topic and the catalogue.

The Flask shop (``shop.py``) maps :class:`OrderColumns` on Flask-SQLAlchemy's
``db.Model``; the FastAPI shop (``examples/fastapi_shop/shop.py``) maps it on
its own declarative base. Both are the same order service on the same table.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

__all__ = ["CATALOGUE", "MAX_QTY", "TOPIC", "OrderColumns"]

#: where ``OrderCreated`` is published
TOPIC = "Orders"
#: item -> unit price; any other item answers 422
CATALOGUE = {"tea": 2.5, "coffee": 3.0, "cake": 4.0, "scone": 2.0}
#: more of one item in one order is out of stock (409)
MAX_QTY = 10


class OrderColumns:
    """The ``shop_order`` table's columns, a mixin each shop maps on its own base."""

    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ref: Mapped[str] = mapped_column(String(64), unique=True)
    item: Mapped[str] = mapped_column(String(64))
    qty: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
