"""The demo's orders: the fixed mix it sends, and one order posted to the shop."""

from __future__ import annotations

import http.client
import json
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["Order", "plan", "post"]


@dataclass(frozen=True, slots=True)
class Order:
    ref: str
    item: str
    qty: int
    kind: str  # "ok", "crash" (the relay dies between half and commit), "unknown", "too_many"


def plan(count: int) -> list[Order]:
    """A fixed mix: about 80 % plain, 4 % relay crashes, the rest rolled back."""
    orders = []
    items = ("tea", "coffee", "cake", "scone")
    for i in range(count):
        if i % 25 == 7:
            kind, item, qty = "crash", items[i % 4], 1 + i % 5
        elif i % 13 == 5:
            kind, item, qty = "unknown", "unicorn", 1
        elif i % 11 == 3:
            kind, item, qty = "too_many", items[i % 4], 99
        else:
            kind, item, qty = "ok", items[i % 4], 1 + i % 5
        prefix = "crash-" if kind == "crash" else "order-"
        orders.append(Order(f"{prefix}{uuid.uuid4().hex[:12]}", item, qty, kind))
    return orders


def post(address: str, order: Order) -> tuple[int, dict[str, Any]]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = json.dumps({"ref": order.ref, "item": order.item, "qty": order.qty})
        conn.request("POST", "/orders", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"raw": raw.decode("utf-8", "replace")}
        return response.status, data
    finally:
        conn.close()
