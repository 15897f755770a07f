"""Where the demo's relay sends (``--target``): broker_lite's doors or a RabbitMQ node.

broker_lite is started by the run as a part, with :data:`BROKER_FLAGS`;
:func:`broker_address` is the address the shop's parts are given (creating the
shop's topic when the target or the ACL needs it made up front).
:func:`rabbitmq_node` starts a RabbitMQ node as the tests do and
:func:`rabbitmq_export` reads its stream back for the audits. The nats-server
target is :mod:`examples.demo.nats_part`.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from examples.demo.parts import DemoError

__all__ = ["BROKER_FLAGS", "TARGETS", "broker_address", "rabbitmq_export", "rabbitmq_node"]


#: ``--target``: broker_lite's native door, its gRPC door as RocketMQ 5's proxy behaves,
#: a private nats-server with JetStream (examples/demo/nats_part.py), or a RabbitMQ node
#: (started as the tests start one; the shop's Orders is a stream)
TARGETS = ("broker-lite", "rocketmq-proxy", "nats", "rabbitmq")
#: broker_lite's flags per target (check-backs a second after a half is left open)
BROKER_FLAGS = {
    "broker-lite": ("--tx-timeout", "1", "--tx-check-interval", "0.5", "--auto-create-topics"),
    # strict proxy mode: topics must be typed TRANSACTION (by broker_address, as mqadmin would)
    "rocketmq-proxy": ("--grpc-proxy-semantics", "--tx-timeout", "1",
                       "--tx-check-interval", "0.5"),
}


def broker_address(target: str, native: str, grpc: str,
                    admin: tuple[str, str] | None = None) -> str:
    """What the shop's parts are given: broker_lite's native door, or a RocketMQ proxy."""
    if target == "broker-lite" and admin is None:
        return native
    from broker_lite.client import Admin
    from examples.flask_shop.inventory import TOPIC

    access_key, secret_key = admin if admin is not None else (None, None)
    with Admin(native, access_key=access_key, secret_key=secret_key) as admin_client:
        if target == "broker-lite":
            if admin is not None:  # under an ACL topics are made by an admin, not on first use
                admin_client.create_topic(TOPIC)
            return native
        admin_client.create_topic(TOPIC, attributes={"message.type": "TRANSACTION"})
    return f"rocketmq://{grpc}"


def rabbitmq_node(stack: contextlib.ExitStack) -> str:
    """A RabbitMQ node started as ``make test`` starts one (a plain process on private
    loopback ports, tests/support/rabbitmq_server.py), and the shop's topic as a stream
    (the export re-reads it for the audit): the node's URL."""
    import aio_pika

    from examples.flask_shop.inventory import TOPIC
    from tests.support.rabbitmq_server import start_rabbitmq
    from tests.support.servers import ServerUnavailable

    try:
        node = stack.enter_context(start_rabbitmq())
    except ServerUnavailable as exc:
        raise DemoError(f"--target rabbitmq: {exc}") from None

    async def declare() -> None:
        connection = await aio_pika.connect(node.url, timeout=30)
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(TOPIC, durable=True,
                                        arguments={"x-queue-type": "stream"})

    asyncio.run(declare())
    return node.url


def rabbitmq_export(work: Path, url: str) -> Path:
    """What the node's stream holds, as a broker export (``rocketbox broker-export``)."""
    from sqlalchemy import create_engine

    from examples.flask_shop.inventory import TOPIC
    from outbox import Outbox
    from outbox.targets.choose import export_messages

    out = work / "export.jsonl"
    engine = create_engine("sqlite://")
    try:
        export_messages(Outbox(engine=engine, broker=url), out, source=TOPIC)
    finally:
        engine.dispose()
    return out
