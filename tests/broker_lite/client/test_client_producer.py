"""Producers against a real broker: send, batch, pipelining, one-way, errors, clean shutdown."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from broker_lite.client import (
    Admin,
    AsyncProducer,
    AsyncPullConsumer,
    BatchSendError,
    BrokerUnavailableError,
    ClientClosedError,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionProducer,
)
from broker_lite.errors import (
    MessageTooLargeError,
    NoPermissionError,
    RequestTimeoutError,
    UnavailableError,
)
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.broker_lite.client.client_support import StartBroker, drain
from tests.support import BrokerLiteServer, free_port


class _NoListener:
    def execute_local_transaction(self, msg: object, arg: object) -> None:
        return None

    def check_local_transaction(self, msg: object) -> None:
        return None


@pytest.mark.timeout(60)
def test_send_then_consume_round_trip(broker: BrokerLiteServer) -> None:
    threads_before = set(threading.enumerate())
    with Producer("pg", broker.native) as producer:
        sent = producer.send(Message("Orders", "order-1", tags="created", keys="k1 k2",
                                     properties={"region": "eu"}))
        assert sent.topic == "Orders" and sent.msg_id and sent.queue_offset == 0
        assert sent.send_status.value == "SEND_OK"
        with PullConsumer("cg", broker.native) as consumer:
            [got] = drain(consumer, "Orders", 1)
            assert consumer.committed_offset("Orders", got.queue_id) == 1
    assert got.msg_id == sent.msg_id and got.dedupe_key == sent.msg_id
    assert (got.topic, got.body, got.tags, got.keys) == ("Orders", b"order-1", "created",
                                                         ("k1", "k2"))
    assert got.properties["region"] == "eu"
    assert (got.queue_id, got.queue_offset) == (sent.queue_id, sent.queue_offset)
    assert got.store_timestamp >= got.born_timestamp > 0 and got.reconsume_times == 0
    # shutdown joined every thread the clients started
    assert set(threading.enumerate()) <= threads_before


@pytest.mark.timeout(60)
def test_sharding_key_keeps_messages_on_one_queue_in_order(broker: BrokerLiteServer) -> None:
    with Producer("pg", broker.native) as producer:
        results = [producer.send(Message("Seq", f"{i}", sharding_key="customer-9"))
                   for i in range(10)]
        spread = {producer.send(Message("Seq", "x")).queue_id for _ in range(8)}
    assert len({r.queue_id for r in results}) == 1
    assert [r.queue_offset for r in results] == sorted(r.queue_offset for r in results)
    assert len(spread) > 1  # without a key the broker spreads messages over queues


@pytest.mark.timeout(60)
def test_send_batch_reports_each_item(broker: BrokerLiteServer) -> None:
    with Producer("pg", broker.native) as producer:
        results = producer.send_batch([Message("Batch", f"m{i}") for i in range(5)])
        assert [r.topic for r in results] == ["Batch"] * 5
        assert len({r.msg_id for r in results}) == 5
        assert producer.send_batch([]) == []
        mixed = [Message("Batch", "ok-1"), Message("RMQ_SYS_TRANS_HALF_TOPIC", "refused"),
                 Message("Batch", "ok-2")]
        with pytest.raises(BatchSendError) as info:
            producer.send_batch(mixed)
    outcomes = info.value.outcomes
    assert len(outcomes) == 3 and not info.value.retriable
    assert isinstance(outcomes[1], NoPermissionError)
    assert [i for i, _ in info.value.errors] == [1]
    stored = [o for o in outcomes if not isinstance(o, Exception)]
    with PullConsumer("cg", broker.native) as consumer:
        got = drain(consumer, "Batch", 7)
    assert {m.msg_id for m in got} >= {r.msg_id for r in results} | {s.msg_id for s in stored}


@pytest.mark.timeout(60)
def test_send_async_keeps_many_requests_in_flight(broker: BrokerLiteServer) -> None:
    with Producer("pg", broker.native) as producer:
        futures = [producer.send_async(Message("Many", f"m{i}")) for i in range(500)]
        results = [f.result(30) for f in futures]
    assert len({r.msg_id for r in results}) == 500
    per_queue: dict[int, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    assert sum(len(v) for v in per_queue.values()) == 500
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))


@pytest.mark.timeout(60)
def test_async_producer_pipelines_on_one_connection(broker: BrokerLiteServer) -> None:
    async def main() -> list[str]:
        async with AsyncProducer("pg", broker.native) as producer:
            results = await asyncio.gather(*(producer.send(Message("Async", f"m{i}"))
                                             for i in range(300)))
            assert producer.session.connections == 1
            await producer.send_oneway(Message("Async", "one-way"))
        return [r.msg_id for r in results]

    ids = asyncio.run(main())
    assert len(set(ids)) == 300
    with PullConsumer("cg", broker.native) as consumer:
        got = drain(consumer, "Async", 301)
    assert b"one-way" in {m.body for m in got}


@pytest.mark.timeout(60)
def test_send_oneway_reaches_the_broker(broker: BrokerLiteServer) -> None:
    with Producer("pg", broker.native) as producer:
        producer.send_oneway(Message("OneWay", "fire and forget"))
    with PullConsumer("cg", broker.native) as consumer:
        [got] = drain(consumer, "OneWay", 1)
    assert got.body == b"fire and forget"


@pytest.mark.timeout(60)
def test_refusals_raise_the_brokers_error(start_broker: StartBroker) -> None:
    with start_broker("--max-message-size", "1K") as broker, \
            Producer("pg", broker.native) as producer:
        with pytest.raises(MessageTooLargeError) as info:
            producer.send(Message("Big", b"x" * 2048))
        assert not info.value.retriable
        with pytest.raises(NoPermissionError):
            producer.send(Message("RMQ_SYS_TRANS_OP_HALF_TOPIC", b"x"))
        # the connection is still good
        assert producer.send(Message("Big", b"small")).topic == "Big"


@pytest.mark.timeout(30)
def test_unreachable_broker_fails_fast_and_retriable() -> None:
    threads_before = set(threading.enumerate())
    server = f"127.0.0.1:{free_port()}"
    producer = Producer("pg", server, timeout=1.0)
    with pytest.raises(BrokerUnavailableError) as info:
        producer.start()
    assert isinstance(info.value, UnavailableError) and info.value.retriable
    assert "cannot connect" in str(info.value)
    with pytest.raises(ClientClosedError):
        producer.send(Message("T", b"x"))
    clients = [TransactionProducer("tg", _NoListener(), server), PullConsumer("g", server),
               PushConsumer("g", server, listener=lambda msg: None), Admin(server)]
    for client in clients:
        with pytest.raises(BrokerUnavailableError):
            client.start()
    assert set(threading.enumerate()) <= threads_before  # nothing left running


@pytest.mark.timeout(60)
def test_admin_creates_and_lists_topics(broker: BrokerLiteServer) -> None:
    with Admin(broker.native) as admin:
        info = admin.create_topic("Made", queues=8, perm=6)
        assert (info.topic, info.queues, info.perm) == ("Made", 8, 6)
        assert "Made" in {t.topic for t in admin.list_topics()}
        assert admin.topic_route("Made").max_offsets == [0] * 8
    with Producer("pg", broker.native) as producer:
        sent = producer.send(Message("Made", "k", keys="lookup-me"))
    with Admin(broker.native) as admin:
        [found] = admin.query_by_key("lookup-me")
    assert found.msg_id == sent.msg_id


@pytest.mark.timeout(30)
def test_request_without_answer_times_out_and_the_connection_stays(
        broker: BrokerLiteServer) -> None:
    async def main() -> None:
        async with AsyncPullConsumer("cg", broker.native) as consumer:
            session = consumer.session
            held = m.PullRequest(group="cg", topic="Quiet", queue_id=0, offset=0,
                                 long_poll_ms=10_000)
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError) as info:
                await session.request(RequestCode.PULL_MESSAGE, held, m.PullResponse,
                                      timeout=0.3)
            assert 0.3 <= time.monotonic() - started < 2 and info.value.retriable
            # the late answer is dropped; the connection goes on serving
            result = await consumer.pull("Quiet", 0, 0)
            assert result.messages == [] and session.connections == 1

    asyncio.run(main())
