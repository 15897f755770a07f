"""``broker-lite serve`` as a process: ready line, bind policy, shutdown and restart."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import StartBroker, WireClient, run_args
from tests.support import BrokerLiteServer

RUN_TIMEOUT = 60


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(run_args(args), capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.mark.timeout(90)
def test_help_explains_every_option() -> None:
    done = _run("--help")
    assert done.returncode == 0
    for option in ("--data-dir", "--host", "--port", "--grpc-port", "--flush", "--tx-timeout",
                   "--tx-check-interval", "--tx-check-max", "--segment-size", "--acl",
                   "--insecure", "--reject-transactions", "--no-auto-create-topics",
                   "--default-queues", "--max-frame-size", "--delay-time-scale",
                   "--broker-name", "--log-level"):
        assert option in done.stdout, option
    assert "MessagingService" in done.stdout


@pytest.mark.timeout(90)
def test_the_ready_line_is_the_only_stdout(broker: BrokerLiteServer) -> None:
    assert broker.stdout_lines == [f"broker_lite ready native={broker.native} grpc={broker.grpc}"]
    assert broker.native.startswith("127.0.0.1:") and not broker.native.endswith(":0")
    assert "ready" in broker.stderr_text()  # logs go to stderr


@pytest.mark.timeout(90)
def test_grpc_door_serves_the_rocketmq_v5_messaging_service(broker: BrokerLiteServer) -> None:
    host, _, port = broker.grpc.rpartition(":")
    request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="CliTopic"))
    with grpc.insecure_channel(broker.grpc) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(request, metadata=[("x-mq-client-id", "cli-test")], timeout=10)
        anonymous = stub.QueryRoute(request, timeout=10)
    assert route.status.code == definition_pb2.Code.OK
    assert [q.id for q in route.message_queues] == [0, 1, 2, 3]  # --default-queues
    endpoints = route.message_queues[0].broker.endpoints
    assert [(a.host, a.port) for a in endpoints.addresses] == [(host, int(port))]
    # errors come back in the response's Status, the way RocketMQ's proxy answers them
    assert anonymous.status.code == definition_pb2.Code.CLIENT_ID_REQUIRED


@pytest.mark.timeout(90)
def test_non_loopback_bind_needs_an_acl_or_insecure(tmp_path: Path) -> None:
    done = _run("--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert "--insecure" in done.stderr and "--acl" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "d").exists()  # refused before touching anything


@pytest.mark.timeout(90)
def test_insecure_allows_a_wildcard_bind(start_broker: StartBroker) -> None:
    with start_broker("--host", "0.0.0.0", "--insecure") as server:
        port = server.native.rpartition(":")[2]
        with WireClient(f"127.0.0.1:{port}") as client:
            assert client.call(RequestCode.TOPIC_LIST, m.Empty()) is not None


@pytest.mark.timeout(90)
def test_a_malformed_acl_file_is_refused_naming_the_field(tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [{"access_key": "a", "secret_key": "s",
                                             "topic_perms": {"T": "WRITE"}}]}))
    done = _run("--data-dir", str(tmp_path / "d"), "--port", "0", "--acl", str(acl))
    assert done.returncode == 2
    assert "accounts[0].topic_perms['T']" in done.stderr


@pytest.mark.timeout(90)
def test_bad_values_exit_2_with_a_message(tmp_path: Path) -> None:
    done = _run("--data-dir", str(tmp_path / "d"), "--port", "0", "--default-queues", "0")
    assert done.returncode == 2 and "default_queues" in done.stderr
    done = _run("--data-dir", str(tmp_path / "d"), "--segment-size", "lots")
    assert done.returncode == 2 and "not a size" in done.stderr


@pytest.mark.timeout(120)
def test_sigterm_exits_0_and_a_restart_keeps_the_data(start_broker: StartBroker,
                                                      tmp_path: Path) -> None:
    data_dir = tmp_path / "kept"
    with start_broker("--segment-size", "64K", data_dir=data_dir) as first:
        with WireClient(first.native) as client:
            client.create_topic("Kept", queues=1)
            for i in range(50):
                client.send("Kept", b"m%d" % i, queue_id=0)
            client.call(RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
                group="cg", topic="Kept", queue_id=0, offset=20))
            # a parked long poll must not hold up the shutdown
            client.start(RequestCode.PULL_MESSAGE, m.PullRequest(
                group="cg", topic="Kept", queue_id=0, offset=50, long_poll_ms=30_000))
            assert client.call(RequestCode.TOPIC_LIST, m.Empty()) is not None
            assert first.stop(signal.SIGTERM) == 0
            assert client.closed_by_peer()
        assert "broker stopped" in first.stderr_text()

    with start_broker(data_dir=data_dir) as second, WireClient(second.native) as client:
        pulled = client.pull("Kept", max_messages=100)
        assert [x.body for x in pulled.messages] == [b"m%d" % i for i in range(50)]
        offset = client.call(RequestCode.QUERY_CONSUMER_OFFSET,
                             m.OffsetRequest(group="cg", topic="Kept", queue_id=0))
        assert offset.offset == 20


@pytest.mark.timeout(30)
def test_topics_are_not_auto_created_unless_asked(tmp_path: Path) -> None:
    """A typo in a topic name must be an error, not a new topic: auto-create is opt-in."""
    from broker_lite.cli import build_parser
    from broker_lite.cli.serve import build_configs

    def auto_create(*flags: str) -> bool:
        args = build_parser().parse_args(["serve", "--data-dir", str(tmp_path), *flags])
        return build_configs(args)[0].auto_create_topics

    assert auto_create() is False
    assert auto_create("--auto-create-topics") is True
    assert auto_create("--auto-create-topics", "--no-auto-create-topics") is False


@pytest.mark.timeout(30)
def test_the_clients_limits_are_the_brokers() -> None:
    from broker_lite.client import limits
    from broker_lite.core.topics import SYSTEM_TOPICS

    assert limits.SYSTEM_TOPICS == SYSTEM_TOPICS
    assert all(t.startswith(limits.SYSTEM_TOPIC_PREFIX) or t in SYSTEM_TOPICS
               for t in SYSTEM_TOPICS)
