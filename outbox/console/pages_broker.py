"""The broker's pages: topics (create one), consumer groups (reset an offset),
transactions (pending and discarded halves), dead letters (resend one)."""

from __future__ import annotations

import time

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from broker_lite.client.admin import names as n
from outbox.console.broker_view import browse_rows, dead_letter_groups, group_views, is_internal
from outbox.console.handlers import confirm_or_run, console_of, parse_input, render

__all__ = ["ROUTES"]


def _field(form: FormData, name: str) -> str:
    value = str(form.get(name) or "").strip()
    if not value:
        raise ValueError(f"{name} is empty")
    return value


def _int_field(form: FormData, name: str) -> int:
    return parse_input(name, _field(form, name), int, "a whole number")


def topics(request: Request) -> Response:
    console = console_of(request)
    infos = console.admin().list_topics()
    rates = console.sampler.state.topic_rates
    shown = [{"topic": t.topic, "queues": t.queues, "perm": t.perm,
              "max_offsets": list(t.max_offsets), "messages": sum(t.max_offsets),
              "rate": rates.get(t.topic), "internal": is_internal(t.topic)} for t in infos]
    shown.sort(key=lambda t: (t["internal"], t["topic"]))
    return render(request, "topics.html", topics=shown)


async def create_topic(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    name = str(form.get("topic") or "").strip()

    def run(form: FormData) -> str:
        info = console.admin().create_topic(_field(form, "topic"), _int_field(form, "queues"))
        return f"{info.topic} has {info.queues} queue(s)"

    return await confirm_or_run(request, what=f"create topic {name!r}", run=run,
                                back="/topics")


def groups(request: Request) -> Response:
    console = console_of(request)
    return render(request, "groups.html", groups=group_views(console.admin()))


async def reset_offset(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    where = (f"{form.get('group')} on {form.get('topic')} queue {form.get('queue_id')} "
             f"to {form.get('offset')}")

    def run(form: FormData) -> str:
        group, topic = _field(form, "group"), _field(form, "topic")
        queue_id, offset = _int_field(form, "queue_id"), _int_field(form, "offset")
        console.admin().reset_offset(group, topic, queue_id, offset)
        return "done (live consumers pick it up at their next rebalance or restart)"

    return await confirm_or_run(request, what=f"reset the offset of {where}", run=run,
                                back="/groups")


def transactions(request: Request) -> Response:
    console = console_of(request)
    pending = console.admin().pending_transactions(500)
    now_ms = int(time.time() * 1000)
    halves = [{"tx_id": h.transaction_id, "group": h.producer_group, "topic": h.real_topic,
               "age": (now_ms - h.store_timestamp) / 1000, "checks": h.check_times,
               "last_check_ms": h.last_check_ms, "next_check_ms": h.next_check_ms}
              for h in pending.halves]
    discarded = browse_rows(console.admin(), n.TRANS_CHECK_MAX_TIME_TOPIC, 50)
    return render(request, "transactions.html", halves=halves, pending=pending.pending,
                  discarded=discarded)


def dead_letters(request: Request) -> Response:
    console = console_of(request)
    return render(request, "dlq.html", groups=dead_letter_groups(console.admin()))


def dead_letter_group(request: Request) -> Response:
    console = console_of(request)
    group = request.path_params["group"]
    messages = browse_rows(console.admin(), n.DLQ_PREFIX + group, 50)
    return render(request, "dlq_group.html", group=group, messages=messages)


async def resend(request: Request) -> Response:
    console = console_of(request)
    group = request.path_params["group"]
    form = await request.form()

    def run(form: FormData) -> str:
        result = console.admin().resend(n.DLQ_PREFIX + group, 0, _int_field(form, "queue_offset"),
                                      _field(form, "msg_id"), group)
        return f"{result.msg_id} is on {result.topic} at offset {result.queue_offset}"

    return await confirm_or_run(
        request, what=f"resend dead letter {form.get('msg_id')} to group {group}", run=run,
        back=f"/dlq/{group}")


ROUTES = [
    Route("/topics", topics),
    Route("/topics/create", create_topic, methods=["POST"]),
    Route("/groups", groups),
    Route("/groups/reset", reset_offset, methods=["POST"]),
    Route("/transactions", transactions),
    Route("/dlq", dead_letters),
    Route("/dlq/{group}", dead_letter_group),
    Route("/dlq/{group}/resend", resend, methods=["POST"]),
]
