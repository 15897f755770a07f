"""``broker-lite consume``: consume as a member of a group, one JSON line per message.

It joins ``--group`` for ``--topic`` (so it shares the queues with the
group's other live members), long-polls its queues from the group's
committed offsets (a new group starts at the first stored message), prints
each message and acks it once printed. It stops after ``--max`` messages, or
when no message came for ``--timeout`` seconds. Messages it fetched but did
not print are not acked: the group gets them again.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import json
import sys
from typing import Any

from broker_lite.client import AsyncPullConsumer, ReceivedMessage
from broker_lite.errors import BrokerError, UnavailableError

from .arg_types import non_negative_seconds, positive_int
from .send import add_connection_args, client_config, run_client

__all__ = ["message_json", "register", "run"]

#: longest single long poll; shorter when --timeout leaves less
_LONG_POLL_MS = 2_000


def register(sub: Any) -> None:
    p = sub.add_parser(
        "consume",
        help="consume messages as a group member and print them (JSON lines), acking each",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_args(p)
    what = p.add_argument_group("what to consume")
    what.add_argument("--topic", required=True, help="topic to consume")
    what.add_argument("--group", required=True, help="consumer group")
    what.add_argument("--tag", default="*", metavar="EXPR",
                      help='tag filter, e.g. "TagA || TagB" (default: * = all)')
    what.add_argument("--max", type=positive_int, default=None, metavar="N",
                      help="stop after N messages (default: no limit)")
    what.add_argument("--timeout", type=non_negative_seconds, default=10.0, metavar="S",
                      help="stop when no message came for S seconds (default: 10; 0 waits "
                           "forever)")
    what.add_argument("--base64", action="store_true",
                      help="print every body as base64 (bodies that are not UTF-8 always are)")
    p.set_defaults(handler=functools.partial(run, parser=p))


def message_json(msg: ReceivedMessage, *, force_base64: bool = False) -> dict[str, Any]:
    body: str
    encoding = "utf-8"
    try:
        if force_base64:
            raise UnicodeDecodeError("utf-8", b"", 0, 0, "base64 asked for")
        body = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        body = base64.b64encode(msg.body).decode("ascii")
        encoding = "base64"
    return {
        "msg_id": msg.msg_id,
        "topic": msg.topic,
        "tag": msg.tags,
        "keys": " ".join(msg.keys),
        "body": body,
        "body_encoding": encoding,
        "properties": dict(msg.properties),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "transaction_id": msg.transaction_id,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
    }


Inbox = asyncio.Queue[ReceivedMessage | BrokerError]


async def _pull_queue(consumer: AsyncPullConsumer, topic: str, queue_id: int, tag: str,
                      out: Inbox, room: asyncio.Semaphore) -> None:
    """Feed ``out`` from one queue; ``room`` limits what is fetched ahead of printing.

    A refusal that will not go away (not a retriable error) is put in ``out``,
    so the command stops with it.
    """
    try:
        offset = max(await consumer.committed_offset(topic, queue_id), 0)
        while True:
            await room.acquire()
            try:
                result = await consumer.pull(topic, queue_id, offset, 16,
                                             long_poll_ms=_LONG_POLL_MS, tag_expr=tag)
            except UnavailableError:
                await asyncio.sleep(0.2)
                continue
            finally:
                room.release()
            offset = result.next_offset
            for msg in result.messages:
                await room.acquire()
                await out.put(msg)
    except BrokerError as exc:
        await out.put(exc)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = client_config(args, parser)

    async def main() -> int:
        async with AsyncPullConsumer(args.group, config=config) as consumer:
            await consumer.subscribe(args.topic, args.tag)
            queues = await consumer.assignment(args.topic)
            inbox: Inbox = asyncio.Queue()
            room = asyncio.Semaphore(64)
            pullers = [asyncio.create_task(_pull_queue(consumer, args.topic, q, args.tag,
                                                       inbox, room)) for q in queues]
            try:
                await _print_loop(consumer, inbox, room, args)
            finally:
                for task in pullers:
                    task.cancel()
                for task in pullers:
                    with contextlib.suppress(asyncio.CancelledError, BrokerError):
                        await task
        return 0

    return run_client("consume", main)


async def _print_loop(consumer: AsyncPullConsumer, inbox: Inbox, room: asyncio.Semaphore,
                      args: argparse.Namespace) -> None:
    printed = 0
    idle = args.timeout or None
    while args.max is None or printed < args.max:
        try:
            item = await asyncio.wait_for(inbox.get(), timeout=idle)
        except TimeoutError:
            return
        if isinstance(item, BrokerError):
            raise item
        sys.stdout.write(json.dumps(message_json(item, force_base64=args.base64),
                                    ensure_ascii=False) + "\n")
        sys.stdout.flush()
        await consumer.ack(item)
        room.release()
        printed += 1
