"""``POST /orders``: the Order row and ``OrderCreated`` commit together, or neither does."""

from __future__ import annotations

import json
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from examples.django_shop.orders.models import Order
from integrations.django import transactional_message

CATALOGUE = {"tea": 2.5, "coffee": 3.0, "cake": 4.0, "scone": 2.0}
MAX_QTY = 10


class OutOfStock(Exception):
    pass


def _order(response: HttpResponse) -> dict[str, object]:
    data: dict[str, object] = json.loads(response.content)
    return data


@csrf_exempt
@require_POST
@transactional_message(topic="Orders", tag="OrderCreated", body=_order,
                       keys=lambda response: str(_order(response)["ref"]))
def create_order(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    order = Order.objects.create(ref=str(data.get("ref") or uuid.uuid4().hex),
                                 item=str(data["item"]), qty=int(data.get("qty", 1)))
    if order.item not in CATALOGUE:  # 422: the order is rolled back, nothing is sent
        return JsonResponse({"error": f"unknown item {order.item!r}"}, status=422)
    if order.qty > MAX_QTY:  # an exception: rolled back as well (Django answers 500)
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
