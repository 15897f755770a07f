"""``broker-lite topic create|list|route``: manage a running broker's topics (JSON lines)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any

from broker_lite.client import AsyncAdmin, TopicInfo

from .send import add_connection_args, client_config, run_client

__all__ = ["register", "run", "topic_json"]

_PERMS = {"2": 2, "4": 4, "6": 6, "w": 2, "r": 4, "rw": 6}


def _perm(text: str) -> int:
    value = _PERMS.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(
            f"perm must be 2 (write), 4 (read) or 6 (read and write), got {text!r}")
    return value


def _queues(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"queues must be a whole number in [1, 1024], "
                                         f"got {text!r}")
    return int(text)


def _attributes(text: str) -> tuple[dict[str, str], list[str]]:
    """mqadmin's ``-a``: ``+message.type=TRANSACTION`` sets, ``-message.type`` removes;
    several are separated by commas."""
    added: dict[str, str] = {}
    removed: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part[1:].partition("=")
        if part.startswith("+") and sep and key and value:
            added[key] = value
        elif part.startswith("-") and not sep and key:
            removed.append(key)
        else:
            raise argparse.ArgumentTypeError(
                f"attribute {part!r} is neither +KEY=VALUE (set) nor -KEY (remove), e.g. "
                "+message.type=TRANSACTION")
    return added, removed


def register(sub: Any) -> None:
    p = sub.add_parser(
        "topic", help="create, list and show topics of a running broker",
        description="Manage topics on a running broker. Each command prints JSON lines: "
                    "topic, queues, perm (4 read, 2 write, 6 both), max_offsets (one per "
                    "queue) and attributes (message.type).")
    commands = p.add_subparsers(dest="topic_command", metavar="ACTION")
    commands.required = True

    create = commands.add_parser(
        "create", help="create a topic (or grow its queues, change its permission)",
        description="Create a topic. Creating an existing topic grows its queue count (queues "
                    "never shrink: they hold data) and sets its permission. On a broker run "
                    "with --acl it needs Create on the topic (Update for an existing one); "
                    "admin accounts have both. Names under %%RETRY%% and %%DLQ%% are refused.")
    add_connection_args(create)
    create.add_argument("--topic", required=True, help="topic name")
    create.add_argument("--queues", type=_queues, default=4, metavar="N",
                        help="number of queues (default: 4)")
    create.add_argument("--perm", type=_perm, default=6,
                        help="4 read, 2 write, 6 read and write (default: 6)")
    create.add_argument("--attributes", "-a", type=_attributes, default=({}, []),
                        metavar="+KEY=VALUE,-KEY",
                        help="topic attributes to set (+) or remove (-), as mqadmin "
                             "updateTopic -a; broker_lite knows message.type (NORMAL, FIFO, "
                             "DELAY, TRANSACTION, MIXED; default NORMAL), which the gRPC "
                             "door enforces with --grpc-proxy-semantics, e.g. "
                             "-a +message.type=TRANSACTION (a removal: --attributes=-message.type)")
    create.set_defaults(handler=functools.partial(run, parser=create, action="create"))

    listing = commands.add_parser("list", help="list every topic, one JSON line each",
                                  description="List every topic, system topics included.")
    add_connection_args(listing)
    listing.set_defaults(handler=functools.partial(run, parser=listing, action="list"))

    route = commands.add_parser("route", help="show one topic",
                                description="Show one topic; exit 1 if it does not exist.")
    add_connection_args(route)
    route.add_argument("--topic", required=True, help="topic name")
    route.set_defaults(handler=functools.partial(run, parser=route, action="route"))


def topic_json(info: TopicInfo) -> dict[str, Any]:
    return {"topic": info.topic, "queues": info.queues, "perm": info.perm,
            "max_offsets": list(info.max_offsets), "attributes": dict(info.attributes)}


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, action: str) -> int:
    config = client_config(args, parser)

    async def main() -> int:
        async with AsyncAdmin(config=config) as admin:
            if action == "create":
                added, removed = args.attributes
                infos = [await admin.create_topic(args.topic, args.queues, args.perm,
                                                  attributes=added, removed_attributes=removed)]
            elif action == "route":
                infos = [await admin.topic_route(args.topic)]
            else:
                infos = await admin.list_topics()
        for info in infos:
            sys.stdout.write(json.dumps(topic_json(info)) + "\n")
        return 0

    return run_client(f"topic {action}", main)
