"""``broker-lite send``: send messages, one JSON line per stored message.

Also home of the helpers the other client commands share (``consume``,
``topic``, ``bench``): the connection options and the error-to-exit-code
mapping (unreachable broker or refused request: one line on stderr, exit 1;
bad arguments: exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from broker_lite.client import AsyncProducer, ClientConfig, Message, SendResult
from broker_lite.client.config import parse_server
from broker_lite.errors import BrokerError

from .arg_types import positive_float, positive_int

__all__ = [
    "add_connection_args",
    "client_config",
    "register",
    "run",
    "run_client",
    "server_address",
]

DEFAULT_GROUP = "broker-lite-cli"
#: sends in flight at once
_WINDOW = 64


def server_address(text: str) -> str:
    try:
        parse_server(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_connection_args(p: argparse.ArgumentParser) -> None:
    """``--server`` (required), ``--access-key``/``--secret-key``, ``--request-timeout``."""
    group = p.add_argument_group("connection")
    group.add_argument("--server", required=True, type=server_address, metavar="HOST:PORT",
                       help="the broker's native address, as printed in its ready line")
    group.add_argument("--access-key", default=None, metavar="AK",
                       help="access key, for a broker run with --acl (with --secret-key)")
    group.add_argument("--secret-key", default=None, metavar="SK",
                       help="secret key of --access-key")
    group.add_argument("--request-timeout", type=positive_float, default=5.0, metavar="S",
                       help="seconds to wait for each answer, or for an unreachable broker "
                            "(default: 5)")


def client_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ClientConfig:
    if (args.access_key is None) != (args.secret_key is None):
        parser.error("--access-key and --secret-key go together")
    return ClientConfig(server=args.server, access_key=args.access_key,
                        secret_key=args.secret_key, request_timeout=args.request_timeout,
                        connect_timeout=min(3.0, args.request_timeout))


def run_client(command: str, main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run an async command; a BrokerError becomes one line on stderr and exit 1."""
    try:
        return asyncio.run(main())
    except BrokerError as exc:
        print(f"broker-lite {command}: {exc}", file=sys.stderr)
        return 1


def register(sub: Any) -> None:
    p = sub.add_parser(
        "send",
        help="send messages and print where each was stored (JSON lines)",
        description=(
            "Send one message with --body TEXT, or --count N generated messages of --size "
            "bytes each (or --count copies of --body). Prints one JSON line per stored "
            "message: msg_id, topic, queue_id, queue_offset. Exit 1 if the broker is "
            "unreachable or refuses a message."),
    )
    add_connection_args(p)
    what = p.add_argument_group("message")
    what.add_argument("--topic", required=True, help="topic to send to")
    what.add_argument("--tag", default=None, help="the message tag (consumers filter on it)")
    what.add_argument("--keys", default=None, metavar="K",
                      help="message key(s), space separated; indexed for lookups")
    what.add_argument("--body", default=None, metavar="TEXT", help="the body, as UTF-8 text")
    what.add_argument("--count", type=positive_int, default=None, metavar="N",
                      help="how many messages to send (default: 1)")
    what.add_argument("--size", type=positive_int, default=None, metavar="B",
                      help="with --count: generated bodies of B bytes (printable ASCII)")
    what.add_argument("--sharding-key", default=None, metavar="KEY",
                      help="message group: messages with the same key go to the same queue, "
                           "in order")
    what.add_argument("--delay-level", type=int, default=0, metavar="L",
                      help="deliver after RocketMQ delay level L (1..18: 1s 5s 10s 30s 1m ...)")
    what.add_argument("--property", action="append", default=[], metavar="K=V",
                      help="a user property (repeatable)")
    what.add_argument("--group", default=DEFAULT_GROUP,
                      help=f"producer group (default: {DEFAULT_GROUP})")
    p.set_defaults(handler=functools.partial(run, parser=p))


def _body(index: int, size: int) -> bytes:
    head = f"message {index} "
    return (head + "x" * max(0, size - len(head))).encode("ascii")[:size]


def _messages(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Message]:
    if args.body is not None and args.size is not None:
        parser.error("give --body TEXT or --size B, not both")
    if args.body is None and args.size is None:
        parser.error("give --body TEXT, or --count N --size B")
    if not 0 <= args.delay_level <= 18:
        parser.error(f"--delay-level must be in [0, 18], got {args.delay_level}")
    properties: dict[str, str] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--property must be KEY=VALUE, got {item!r}")
        properties[key] = value
    count = args.count or 1
    out: list[Message] = []
    try:
        for i in range(count):
            body = args.body.encode("utf-8") if args.body is not None else _body(i, args.size)
            out.append(Message(args.topic, body, tags=args.tag, keys=args.keys,
                               properties=properties, sharding_key=args.sharding_key,
                               delay_level=args.delay_level))
    except ValueError as exc:
        parser.error(str(exc))
    return out


def _line(result: SendResult) -> str:
    return json.dumps({"msg_id": result.msg_id, "topic": result.topic,
                       "queue_id": result.queue_id, "queue_offset": result.queue_offset})


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = client_config(args, parser)
    messages = _messages(args, parser)

    async def main() -> int:
        async with AsyncProducer(args.group, config=config) as producer:
            for start in range(0, len(messages), _WINDOW):
                window = messages[start:start + _WINDOW]
                results = await asyncio.gather(*(producer.send(msg) for msg in window),
                                               return_exceptions=True)
                failed: BaseException | None = None
                for result in results:
                    if isinstance(result, BaseException):
                        failed = failed or result
                    else:
                        sys.stdout.write(_line(result) + "\n")
                sys.stdout.flush()
                if failed is not None:
                    raise failed
        return 0

    return run_client("send", main)
