"""What ``POST /orders`` accepts, checked before anything touches the database.

The Flask and Django shops parse the raw body with :func:`parse_order_body`;
the FastAPI shop says the same with a pydantic model (``OrderIn``). Every
refusal is a :class:`BadOrder`: a status and one JSON error naming the field
and the limit, never a 500 and never the user's (possibly huge) value echoed
back.

=============================  ======  ==========================================
problem                        status  example
=============================  ======  ==========================================
body larger than 16 KiB        413     a 6 MiB upload
body not JSON                  400     ``qty=2``
JSON, but not an object        422     ``[1, 2]``
``item`` missing / not a text  422     ``{"qty": 2}``, ``{"item": 7}``
``item`` empty or > 64 chars   422     a 5 MiB item name
``qty`` not a whole number     422     ``0``, ``-3``, ``1.5``, ``"two"``, ``true``
  from 1 to 1,000,000
``ref`` not a text of 1..64    422     ``{"ref": ""}``
=============================  ======  ==========================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_BODY_BYTES", "MAX_ITEM_LENGTH", "MAX_QTY_ASKED", "MAX_REF_LENGTH", "BadOrder",
           "OrderRequest", "parse_order_body", "read_order"]

#: the largest request body an order may have (an order is a few dozen bytes)
MAX_BODY_BYTES = 16 * 1024
#: ``shop_order.item`` and ``shop_order.ref`` are ``VARCHAR(64)``
MAX_ITEM_LENGTH = 64
MAX_REF_LENGTH = 64
#: a sane upper bound for ``qty`` (the stock rule, at most 10, is the shop's own 409)
MAX_QTY_ASKED = 1_000_000


class BadOrder(Exception):
    """A request the shop refuses: ``status`` (400/413/422) and a message naming ``field``."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field

    def body(self) -> dict[str, Any]:
        """The JSON error the shops answer with."""
        error: dict[str, Any] = {"error": str(self)}
        if self.field is not None:
            error["field"] = self.field
        return error


@dataclass(frozen=True, slots=True)
class OrderRequest:
    """A checked order: ``item`` and ``ref`` bounded texts, ``qty`` a positive whole number."""

    item: str
    qty: int
    ref: str | None


def parse_order_body(raw: bytes) -> OrderRequest:
    """The order in a raw request body, or :class:`BadOrder`."""
    if len(raw) > MAX_BODY_BYTES:
        raise BadOrder(413, f"the body is {len(raw)} bytes; an order is at most "
                            f"{MAX_BODY_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise BadOrder(400, "the body is not JSON: send an object such as "
                            '{"item": "tea", "qty": 2}') from None
    return read_order(data)


def read_order(data: object) -> OrderRequest:
    """Check a decoded JSON body (see the module doc)."""
    if not isinstance(data, dict):
        raise BadOrder(422, f"the body must be a JSON object, not a JSON "
                            f"{_json_type(data)}")
    item = data.get("item")
    if item is None:
        raise BadOrder(422, "item is required", "item")
    if not isinstance(item, str):
        raise BadOrder(422, f"item must be a text, not a JSON {_json_type(item)}", "item")
    if not 1 <= len(item) <= MAX_ITEM_LENGTH:
        raise BadOrder(422, f"item must be 1 to {MAX_ITEM_LENGTH} characters long, got "
                            f"{len(item)}", "item")
    qty = data.get("qty", 1)
    if isinstance(qty, bool) or not isinstance(qty, int):
        raise BadOrder(422, f"qty must be a whole number, not a JSON {_json_type(qty)}", "qty")
    if not 1 <= qty <= MAX_QTY_ASKED:
        raise BadOrder(422, f"qty must be from 1 to {MAX_QTY_ASKED}", "qty")
    ref = data.get("ref")
    if ref is not None and (not isinstance(ref, str) or not 1 <= len(ref) <= MAX_REF_LENGTH):
        raise BadOrder(422, f"ref must be a text of 1 to {MAX_REF_LENGTH} characters", "ref")
    return OrderRequest(item=item, qty=qty, ref=ref)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number with a fraction" if isinstance(value, float) else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
