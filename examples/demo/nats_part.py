"""``rocketbox demo --target nats``: the demo's nats-server, its stream, and what it holds.

The server is started as the tests start it (tests/support/nats_server.py):
``nats-server -js -sd DIR -p PORT -a 127.0.0.1`` on a free loopback port,
its store in the demo's folder, a part like the others (its own process
group, stopped at the end). The stream ``ORDERS`` binds the shop's topic as
docs/nats.md says (``Orders`` and ``Orders.>``, file storage, a duplicate
window longer than the relay's longest retry). After the run, the stream is
exported (``outbox.targets.nats_export``: one line per stored message) for the
SQL audit and for the Spark audit's ``--broker-export``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from examples.demo.parts import DemoError

if TYPE_CHECKING:
    from examples.demo.run import Demo
    from procgroup import Process

__all__ = ["EXPORT", "STREAM", "export_records", "start_nats_part"]

#: the stream the demo's orders go to, and the file its export is written to
STREAM = "ORDERS"
EXPORT = "nats-export.jsonl"


def _binary() -> str:
    found = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin")
    if found is None:
        raise DemoError("nats-server is not installed: apt-get install nats-server "
                        "(as root; or make system-deps)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_nats_part(demo: Demo, work: Path) -> tuple[Process, str]:
    """Start the demo's nats-server and create its stream; the part and its address."""
    from examples.flask_shop.inventory import TOPIC

    port = _free_port()
    part = demo.part("nats", [_binary(), "-js", "-sd", str(work / "nats"), "-p", str(port),
                              "-a", "127.0.0.1"], dict(os.environ))
    part.wait_for("Server is ready", 60)
    address = f"nats://127.0.0.1:{port}"
    asyncio.run(_create_stream(address, TOPIC))
    return part, address


async def _create_stream(address: str, topic: str) -> None:
    import nats

    from outbox import RelaySettings
    from outbox.targets.nats_stream import stream_settings

    client = await nats.connect(address)
    try:
        await client.jetstream(timeout=10).add_stream(
            **stream_settings(STREAM, [topic], RelaySettings()))
    finally:
        await client.close()


def export_records(address: str, work: Path) -> list[dict[str, Any]]:
    """Export the stream to ``work/EXPORT``; its messages as the SQL audit's records
    (each stored message is one commit record of its ``tx_id``)."""
    from sqlalchemy import create_engine

    from outbox import Outbox
    from outbox.broker_export import read_export
    from outbox.targets.nats_export import export_messages

    path = work / EXPORT
    export_messages(Outbox(engine=create_engine("sqlite://"), broker=address), path,
                    source=STREAM)
    return [{"sysflag": "commit", "transaction_id": m.tx_id, "properties": {},
             "topic": m.destination, "keys": ""} for m in read_export(path)]
