"""The native door in-process, on a real Broker: what a subprocess cannot show.

The server runs on its own event loop in a thread, on port 0, over a real
:class:`~broker_lite.core.Broker` in ``tmp_path``. Tests can then look at the
long-poll hub and the client registry, and extend the dispatch table (the
``handlers`` seam) with a handler that fails unexpectedly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker_lite.core import Broker, BrokerConfig
from broker_lite.protocol import FrameKind, RequestCode, ResponseCode, decode, encode
from broker_lite.protocol import messages as m
from broker_lite.server import NativeServer
from broker_lite.server.handlers import HANDLERS, Handler
from broker_lite.server.native import bind_socket, format_address
from broker_lite.serving import ArrivalHub, ServerConfig, ServerContext
from broker_lite.storage import StoreConfig
from tests.broker_lite.server.server_wire import WireClient
from tests.support import wait_until


async def _explode(ctx: ServerContext, session: Any, request: m.Empty) -> m.TopicListResponse:
    raise RuntimeError("boom: a bug in a handler")


EXPLODING = RequestCode.TOPIC_LIST


@dataclass
class InProcess:
    address: str
    broker: Broker
    hub: ArrivalHub
    server: NativeServer


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcess]:
    handlers: Mapping[int, Handler] = {**HANDLERS, EXPLODING: _explode, 998: _explode}
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="server-loop", daemon=True)
    thread.start()
    broker = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "b", segment_size=1 << 16)))

    async def start() -> InProcess:
        sock = bind_socket("127.0.0.1", 0)
        hub = ArrivalHub(asyncio.get_running_loop())
        broker.add_arrival_listener(hub.notify)
        ctx = ServerContext(broker=broker, config=ServerConfig(port=0), acl=None, hub=hub,
                            loop=asyncio.get_running_loop())
        server = NativeServer(ctx, handlers=handlers)
        await server.start(sock)
        return InProcess(format_address(sock), broker, hub, server)

    running = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield running
    finally:
        asyncio.run_coroutine_threadsafe(running.server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        broker.close()


def _raw_call(client: WireClient, code: int, body: Any) -> tuple[int, bytes]:
    rid = client.send_frame(FrameKind.REQUEST, code, encode(body))
    frame = client.response_to(rid)
    return frame.code, frame.body


@pytest.mark.timeout(30)
def test_an_unexpected_exception_is_a_system_error_and_the_connection_stays(
        in_process: InProcess, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="broker_lite.server")
    with WireClient(in_process.address) as client:
        code, body = _raw_call(client, EXPLODING, m.Empty())
        assert code == ResponseCode.SYSTEM_ERROR
        assert "internal error" in decode(body, m.ErrorBody).message
        assert "boom" not in decode(body, m.ErrorBody).message  # details stay in the log
        # a handler for a code that has no body type is refused, never crashes
        code, body = _raw_call(client, 998, m.Empty())
        assert code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        client.create_topic("After", queues=1)
        assert client.send("After", b"still here", queue_id=0).queue_offset == 0
    logged = [r for r in caplog.records if r.exc_info and "boom" in str(r.exc_info[1])]
    assert logged, "the failure is logged with its traceback"


@pytest.mark.timeout(30)
def test_a_parked_pull_waits_in_the_hub_and_is_released(in_process: InProcess) -> None:
    hub = in_process.hub
    with WireClient(in_process.address) as consumer, WireClient(in_process.address) as producer:
        producer.create_topic("Hub", queues=1)
        rid = consumer.start(RequestCode.PULL_MESSAGE, m.PullRequest(
            group="g", topic="Hub", queue_id=0, offset=0, long_poll_ms=20_000))
        wait_until(lambda: hub.waiting("Hub", 0) == 1, timeout=10)
        producer.send("Hub", b"x", queue_id=0)
        pulled = consumer.finish(RequestCode.PULL_MESSAGE, rid)
        assert [x.body for x in pulled.messages] == [b"x"]
        assert hub.waiting("Hub", 0) == 0

        # a consumer that goes away while parked leaves nothing behind
        leaving = WireClient(in_process.address)
        leaving.start(RequestCode.PULL_MESSAGE, m.PullRequest(
            group="g", topic="Hub", queue_id=0, offset=1, long_poll_ms=20_000))
        wait_until(lambda: hub.waiting("Hub", 0) == 1, timeout=10)
        leaving.close()
        wait_until(lambda: hub.waiting("Hub", 0) == 0, timeout=10)


@pytest.mark.timeout(30)
def test_a_producer_channel_is_dropped_when_its_connection_ends(in_process: InProcess) -> None:
    clients = in_process.broker.clients
    live: Callable[[], bool] = lambda: clients.producer_channel("pg") is not None  # noqa: E731
    with WireClient(in_process.address, client_id="p1") as producer:
        producer.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(client_id="p1",
                                                                producer_groups=["pg"]))
        channel = clients.producer_channel("pg")
        assert channel is not None and channel.client_id == "p1" and channel.is_alive()
    wait_until(lambda: not live(), timeout=10)
    assert not channel.is_alive()
