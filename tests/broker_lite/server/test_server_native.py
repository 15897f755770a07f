"""The native door end to end: a real ``broker-lite serve`` process, raw frames over TCP."""

from __future__ import annotations

import struct
import time

import pytest

from broker_lite.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    PROTOCOL_VERSION,
    FrameKind,
    RequestCode,
    ResponseCode,
    decode,
    encode,
    encode_frame,
)
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import HealthyClient, StartBroker, WireClient
from tests.support import BrokerLiteServer


@pytest.mark.timeout(60)
def test_hello_send_pull_ack_round_trip(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native, hello=False) as client:
        hello: m.HelloResponse = client.call(RequestCode.HELLO, m.HelloRequest(client_id="c1"))
        assert hello.broker_name == "broker-lite"
        assert hello.protocol_version == PROTOCOL_VERSION
        assert hello.max_frame_size == DEFAULT_MAX_FRAME_SIZE
        assert abs(hello.server_time_ms - time.time() * 1000) < 60_000

        assert client.create_topic("Orders", queues=2).queues == 2
        sent = [client.send("Orders", b"order-%d" % i, queue_id=0, tags="new", keys=[f"k{i}"])
                for i in range(3)]
        assert [s.queue_offset for s in sent] == [0, 1, 2]
        assert all(s.topic == "Orders" and s.queue_id == 0 and s.msg_id for s in sent)

        pulled = client.pull("Orders", 0, 0, group="cg")
        assert pulled.status == "found" and pulled.next_offset == 3
        assert [msg.body for msg in pulled.messages] == [b"order-0", b"order-1", b"order-2"]
        assert [msg.msg_id for msg in pulled.messages] == [s.msg_id for s in sent]
        assert pulled.messages[1].keys == ["k1"] and pulled.messages[1].tags == "new"

        for msg in pulled.messages:
            client.call(RequestCode.ACK_MESSAGE, m.AckRequest(
                group="cg", topic="Orders", queue_id=0, queue_offset=msg.queue_offset,
                msg_id=msg.msg_id))
        offset: m.OffsetResponse = client.call(RequestCode.QUERY_CONSUMER_OFFSET, m.OffsetRequest(
            group="cg", topic="Orders", queue_id=0))
        assert offset.offset == 3
        empty = client.pull("Orders", 0, 3)
        assert empty.status == "no_new_message" and empty.messages == []

        found: m.QueryByKeyResponse = client.call(RequestCode.QUERY_MESSAGE_BY_KEY,
                                                  m.QueryByKeyRequest(key="k2"))
        assert [msg.body for msg in found.messages] == [b"order-2"]


@pytest.mark.timeout(60)
def test_many_requests_in_flight_on_one_connection(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native) as client:
        client.create_topic("Pipe", queues=1)
        rids = [client.start(RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="pg", message=m.WireMessage(topic="Pipe", body=b"%d" % i,
                                                       queue_id=0)))
                for i in range(200)]
        results = [client.finish(RequestCode.SEND_MESSAGE, rid) for rid in reversed(rids)]
        assert sorted(r.queue_offset for r in results) == list(range(200))
        assert len(client.pull("Pipe", max_messages=500).messages) == 200


@pytest.mark.timeout(60)
def test_core_errors_become_error_frames(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native) as client:
        error = client.error_of(RequestCode.TOPIC_ROUTE, m.TopicRouteRequest(topic="Nope"))
        assert error.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in error.body.message
        error = client.error_of(RequestCode.ACK_MESSAGE, m.AckRequest(
            group="g", topic="Nope", queue_id=0, queue_offset=5, msg_id="X"))
        assert error.code == ResponseCode.MESSAGE_NOT_FOUND and not error.body.retriable
        # the connection is still fine
        assert client.call(RequestCode.TOPIC_LIST, m.Empty()).topics is not None


@pytest.mark.timeout(60)
def test_first_frame_must_be_hello(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native, hello=False) as client:
        rid = client.start(RequestCode.TOPIC_LIST, m.Empty())
        frame = client.response_to(rid)
        assert frame.code == ResponseCode.MALFORMED_REQUEST
        assert "first frame must be a HELLO" in decode(frame.body, m.ErrorBody).message
        assert client.closed_by_peer()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("hello", "code"), [
    (b"\xc1garbage", ResponseCode.MALFORMED_REQUEST),
    (encode(m.HelloRequest(client_id="")), ResponseCode.MALFORMED_REQUEST),
    (encode(m.HelloRequest(client_id="c", protocol_version=99)),
     ResponseCode.VERSION_NOT_SUPPORTED),
])
def test_bad_hello_is_answered_and_closed(broker: BrokerLiteServer, hello: bytes,
                                          code: ResponseCode) -> None:
    with WireClient(broker.native, hello=False) as client:
        rid = client.send_frame(FrameKind.REQUEST, RequestCode.HELLO, hello)
        assert client.response_to(rid).code == code
        assert client.closed_by_peer()


@pytest.mark.timeout(60)
def test_malformed_body_is_answered_and_the_connection_stays(
        broker: BrokerLiteServer, healthy: HealthyClient) -> None:
    with WireClient(broker.native) as client, healthy.still_served():
        rid = client.send_frame(FrameKind.REQUEST, RequestCode.SEND_MESSAGE,
                                encode({"producer_group": 5}))
        frame = client.response_to(rid)
        assert frame.code == ResponseCode.MALFORMED_REQUEST
        message = decode(frame.body, m.ErrorBody).message
        assert "SEND_MESSAGE" in message and "SendRequest" in message
        assert client.call(RequestCode.TOPIC_LIST, m.Empty()) is not None


@pytest.mark.timeout(60)
def test_unknown_request_code_is_not_supported(broker: BrokerLiteServer,
                                               healthy: HealthyClient) -> None:
    with WireClient(broker.native) as client, healthy.still_served():
        rid = client.send_frame(FrameKind.REQUEST, 999, b"\x80")
        frame = client.response_to(rid)
        assert frame.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert "999" in decode(frame.body, m.ErrorBody).message
        # a broker-to-producer code sent the wrong way is not served either
        rid = client.send_frame(FrameKind.REQUEST, RequestCode.CHECK_TRANSACTION_STATE, b"\x80")
        assert client.response_to(rid).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert client.call(RequestCode.TOPIC_LIST, m.Empty()) is not None


@pytest.mark.timeout(60)
def test_bad_version_is_a_bad_frame_and_the_stream_goes_on(broker: BrokerLiteServer,
                                                         healthy: HealthyClient) -> None:
    with WireClient(broker.native) as client, healthy.still_served():
        body = encode(m.Empty())
        client.send_raw(struct.pack(">IBBHQ", 12 + len(body), 7, 0, RequestCode.TOPIC_LIST, 55)
                        + body)
        frame = client.response_to(55)
        assert frame.code == ResponseCode.BAD_FRAME
        assert "version 7" in decode(frame.body, m.ErrorBody).message
        assert client.call(RequestCode.TOPIC_LIST, m.Empty()) is not None


@pytest.mark.timeout(60)
def test_oversized_frame_is_refused_and_the_connection_closed(
        broker: BrokerLiteServer, healthy: HealthyClient) -> None:
    with WireClient(broker.native) as client, healthy.still_served():
        # Announce a 9 MiB frame; send only the header: the broker must not wait for it.
        client.send_raw(struct.pack(">IBBHQ", 9 << 20, 1, 0, RequestCode.SEND_MESSAGE, 66))
        frame = client.response_to(66)
        assert frame.code == ResponseCode.FRAME_TOO_LARGE
        assert "over the limit" in decode(frame.body, m.ErrorBody).message
        assert client.closed_by_peer()


@pytest.mark.timeout(60)
def test_impossible_length_closes_the_connection(broker: BrokerLiteServer,
                                                 healthy: HealthyClient) -> None:
    with WireClient(broker.native) as client, healthy.still_served():
        client.send_raw(struct.pack(">IBBHQ", 2, 1, 0, RequestCode.TOPIC_LIST, 1))
        assert client.closed_by_peer()


@pytest.mark.timeout(60)
def test_oneway_requests_get_no_response(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native, client_id="ow") as client:
        client.send_frame(FrameKind.ONEWAY, RequestCode.HEARTBEAT,
                          encode(m.HeartbeatRequest(client_id="ow")))
        client.send_frame(FrameKind.ONEWAY, 999, b"")  # unknown, but one-way: no answer
        rid = client.start(RequestCode.TOPIC_LIST, m.Empty())
        frame = client.read_frame()
        assert frame is not None and frame.request_id == rid


@pytest.mark.timeout(60)
def test_heartbeat_must_use_the_hello_client_id(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native, client_id="me") as client:
        client.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(client_id="me",
                                                              producer_groups=["pg"]))
        error = client.error_of(RequestCode.HEARTBEAT, m.HeartbeatRequest(client_id="someone"))
        assert error.code == ResponseCode.MALFORMED_REQUEST and "'me'" in error.body.message


@pytest.mark.timeout(60)
def test_long_poll_returns_as_soon_as_a_message_arrives(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native, client_id="consumer") as consumer, \
            WireClient(broker.native, client_id="producer") as producer:
        producer.create_topic("Live", queues=1)
        poll = consumer.start(RequestCode.PULL_MESSAGE, m.PullRequest(
            group="cg", topic="Live", queue_id=0, offset=0, long_poll_ms=25_000))
        # Frames are served in order, so once this answer is back the pull is
        # parked; it also shows a held pull does not block its connection.
        assert consumer.call(RequestCode.TOPIC_LIST, m.Empty()) is not None
        started = time.monotonic()
        producer.send("Live", b"wake up", queue_id=0)
        pulled: m.PullResponse = consumer.finish(RequestCode.PULL_MESSAGE, poll)
        assert pulled.status == "found" and [x.body for x in pulled.messages] == [b"wake up"]
        assert time.monotonic() - started < 10  # far below the 25 s it asked to wait


@pytest.mark.timeout(60)
def test_long_poll_without_arrival_ends_at_its_deadline(broker: BrokerLiteServer) -> None:
    with WireClient(broker.native) as client:
        client.create_topic("Quiet", queues=1)
        started = time.monotonic()
        pulled = client.pull("Quiet", long_poll_ms=300)
        assert pulled.status == "no_new_message"
        assert time.monotonic() - started >= 0.25


@pytest.mark.timeout(60)
def test_check_back_reaches_the_producer_and_its_answer_commits(
        start_broker: StartBroker) -> None:
    with start_broker("--tx-timeout", "0", "--tx-check-interval", "0.2") as server, \
            WireClient(server.native, client_id="producer-1") as producer, \
            WireClient(server.native, client_id="consumer-1") as consumer:
        producer.create_topic("Tx", queues=1)
        producer.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id="producer-1", producer_groups=["tx-group"]))
        half = producer.send("Tx", b"paid", group="tx-group", queue_id=0, transactional=True)
        assert half.transaction_id
        assert consumer.pull("Tx").status == "no_new_message"  # a half is invisible

        check_frame = producer.read_frame()  # the broker asks: blocks until it does
        assert check_frame is not None and check_frame.kind == FrameKind.REQUEST
        assert check_frame.code == RequestCode.CHECK_TRANSACTION_STATE
        check = decode(check_frame.body, m.CheckTransactionRequest)
        assert check.transaction_id == half.transaction_id
        assert check.producer_group == "tx-group" and check.message.body == b"paid"
        producer.send_raw(encode_frame(FrameKind.RESPONSE, ResponseCode.SUCCESS,
                                       check_frame.request_id,
                                       encode(m.CheckTransactionResponse(state=m.TxState.COMMIT))))

        pulled = consumer.pull("Tx", long_poll_ms=20_000)
        assert [x.body for x in pulled.messages] == [b"paid"]


@pytest.mark.timeout(60)
def test_sync_flush_acknowledges_sends_and_transactions(start_broker: StartBroker) -> None:
    with start_broker("--flush", "sync") as server, WireClient(server.native) as client:
        client.create_topic("Durable", queues=1)
        messages = [m.WireMessage(topic="Durable", body=b"a", queue_id=0),
                    m.WireMessage(topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"b")]  # reserved
        batch: m.SendBatchResponse = client.call(RequestCode.SEND_BATCH, m.SendBatchRequest(
            producer_group="pg", messages=messages))
        ok, refused = batch.results
        assert ok.code == ResponseCode.SUCCESS and ok.result is not None
        assert refused.code == ResponseCode.NO_PERMISSION and refused.error is not None
        half = client.send("Durable", b"t", queue_id=0, transactional=True)
        ended: m.EndTransactionResponse = client.call(
            RequestCode.END_TRANSACTION, m.EndTransactionRequest(
                producer_group="pg", transaction_id=half.transaction_id,
                state=m.TxState.COMMIT, commit_log_offset=half.commit_log_offset,
                queue_offset=half.queue_offset, msg_id=half.msg_id))
        assert ended.outcome == "committed"
        assert [x.body for x in client.pull("Durable").messages] == [b"a", b"t"]
