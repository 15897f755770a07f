"""``POST /orders``: the Order row and ``OrderCreated`` commit together, or neither does.

The body is checked before anything is written
(``examples/flask_shop/order_input.py``): a bad one answers 400, 413 or 422
with a JSON error naming the field; no user input makes a 500. An order over
the stock limit raises :class:`OutOfStock` inside the transaction (rolled
back, nothing sent), and :class:`ShopErrors` turns it into a JSON 409.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from examples.django_shop.orders.models import Order
from examples.flask_shop.order_input import MAX_BODY_BYTES, BadOrder, parse_order_body
from integrations.django import transactional_message

CATALOGUE = {"tea": 2.5, "coffee": 3.0, "cake": 4.0, "scone": 2.0}
MAX_QTY = 10


class OutOfStock(Exception):
    pass


class ShopErrors:
    """Middleware: the shop's exceptions as JSON answers, after the transaction rolled back.

    ``OutOfStock`` is 409, a taken ``ref`` (the unique index) 409, a refused
    body (:class:`BadOrder`) its own status, a body over Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` 413.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, OutOfStock):
            return JsonResponse({"error": str(exc)}, status=409)
        if isinstance(exc, BadOrder):
            return JsonResponse(exc.body(), status=exc.status)
        if isinstance(exc, IntegrityError) and request.path == "/orders":
            return JsonResponse({"error": "an order with this ref exists already",
                                 "field": "ref"}, status=409)
        if isinstance(exc, RequestDataTooBig):
            return JsonResponse({"error": f"an order is at most {MAX_BODY_BYTES} bytes"},
                                status=413)
        return None


def _order(response: HttpResponse) -> dict[str, object]:
    data: dict[str, object] = json.loads(response.content)
    return data


@csrf_exempt
@require_POST
@transactional_message(topic="Orders", tag="OrderCreated", body=_order,
                       keys=lambda response: str(_order(response)["ref"]))
def create_order(request: HttpRequest) -> HttpResponse:
    asked = parse_order_body(request.body)  # BadOrder: 400/413/422, nothing written yet
    order = Order.objects.create(ref=asked.ref or uuid.uuid4().hex, item=asked.item,
                                 qty=asked.qty)
    if order.item not in CATALOGUE:  # 422: the order is rolled back, nothing is sent
        return JsonResponse({"error": f"unknown item {order.item!r}"}, status=422)
    if order.qty > MAX_QTY:  # an exception: rolled back as well (ShopErrors answers 409)
        raise OutOfStock(f"at most {MAX_QTY} {order.item} per order")
    return JsonResponse({"id": order.id, "ref": order.ref, "item": order.item,
                         "qty": order.qty, "price": CATALOGUE[order.item] * order.qty},
                        status=201)


@require_GET
def get_order(request: HttpRequest, ref: str) -> HttpResponse:
    order = Order.objects.filter(ref=ref).first()
    if order is None:
        return JsonResponse({"error": "no such order"}, status=404)
    return JsonResponse({"id": order.id, "ref": order.ref, "item": order.item,
                         "qty": order.qty})
