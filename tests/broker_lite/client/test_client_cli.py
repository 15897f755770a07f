"""``broker-lite send|consume|topic|bench`` as subprocesses against a real broker."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from broker_lite.client import Message, Producer
from tests.support import BrokerLiteServer, free_port


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker_lite", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.timeout(90)
def test_send_then_consume_json_lines(broker: BrokerLiteServer) -> None:
    server = ("--server", broker.native)
    [one] = lines(cli("send", *server, "--topic", "Cli", "--tag", "TagA", "--keys", "k1 k2",
                      "--body", "héllo"))
    assert set(one) == {"msg_id", "topic", "queue_id", "queue_offset"}
    assert one["topic"] == "Cli" and one["queue_offset"] == 0
    many = lines(cli("send", *server, "--topic", "Cli", "--count", "5", "--size", "64"))
    assert len(many) == 5 and len({m["msg_id"] for m in many}) == 5

    got = lines(cli("consume", *server, "--topic", "Cli", "--group", "g1", "--max", "6",
                    "--timeout", "10"))
    assert {g["msg_id"] for g in got} == {one["msg_id"]} | {m["msg_id"] for m in many}
    first = next(g for g in got if g["msg_id"] == one["msg_id"])
    assert first["tag"] == "TagA" and first["keys"] == "k1 k2" and first["body"] == "héllo"
    assert first["body_encoding"] == "utf-8" and first["topic"] == "Cli"
    assert isinstance(first["properties"], dict) and first["properties"]["KEYS"] == "k1 k2"
    generated = [g for g in got if g["msg_id"] != one["msg_id"]]
    assert all(len(str(g["body"])) == 64 for g in generated)

    # everything printed was acked: the group has nothing left
    again = cli("consume", *server, "--topic", "Cli", "--group", "g1", "--timeout", "1")
    assert lines(again) == []
    # another group sees it all again
    other = lines(cli("consume", *server, "--topic", "Cli", "--group", "g2", "--max", "6"))
    assert len(other) == 6


@pytest.mark.timeout(90)
def test_consume_stops_at_max_and_leaves_the_rest(broker: BrokerLiteServer) -> None:
    server = ("--server", broker.native)
    sent = lines(cli("send", *server, "--topic", "Part", "--count", "10", "--size", "8"))
    first = lines(cli("consume", *server, "--topic", "Part", "--group", "g", "--max", "4"))
    rest = lines(cli("consume", *server, "--topic", "Part", "--group", "g", "--timeout", "2"))
    assert len(first) == 4
    assert {m["msg_id"] for m in first} | {m["msg_id"] for m in rest} == {
        m["msg_id"] for m in sent}


@pytest.mark.timeout(60)
def test_consume_prints_binary_bodies_as_base64(broker: BrokerLiteServer) -> None:
    with Producer("pg", broker.native) as producer:
        producer.send(Message("Bin", b"\xff\x00\xfe"))
        producer.send(Message("Bin", b"text"))
    got = lines(cli("consume", "--server", broker.native, "--topic", "Bin", "--group", "g",
                    "--max", "2"))
    by_body = {g["body_encoding"]: g for g in got}
    assert base64.b64decode(str(by_body["base64"]["body"])) == b"\xff\x00\xfe"
    assert by_body["utf-8"]["body"] == "text"
    with Producer("pg", broker.native) as producer:
        producer.send(Message("Bin", b"text"))
    [forced] = lines(cli("consume", "--server", broker.native, "--topic", "Bin", "--group", "g",
                         "--max", "1", "--base64"))
    assert forced["body_encoding"] == "base64" and forced["body"] == "dGV4dA=="


@pytest.mark.timeout(60)
def test_topic_create_and_list(broker: BrokerLiteServer) -> None:
    server = ("--server", broker.native)
    [made] = lines(cli("topic", "create", *server, "--topic", "Made", "--queues", "8"))
    assert made == {"topic": "Made", "queues": 8, "perm": 6, "max_offsets": [0] * 8,
                    "attributes": {}}
    listed = {t["topic"]: t for t in lines(cli("topic", "list", *server))}
    assert listed["Made"]["queues"] == 8
    [route] = lines(cli("topic", "route", *server, "--topic", "Made"))
    assert route["topic"] == "Made"
    missing = cli("topic", "route", *server, "--topic", "Nope")
    assert missing.returncode == 1 and "Nope" in missing.stderr


@pytest.mark.timeout(60)
def test_topic_attributes_are_set_kept_and_removed_like_mqadmin(broker: BrokerLiteServer) -> None:
    server = ("--server", broker.native)
    [made] = lines(cli("topic", "create", *server, "--topic", "TxOnly", "--queues", "2",
                       "-a", "+message.type=TRANSACTION"))
    assert made["attributes"] == {"message.type": "TRANSACTION"}
    [grown] = lines(cli("topic", "create", *server, "--topic", "TxOnly", "--queues", "4"))
    assert grown["queues"] == 4 and grown["attributes"] == {"message.type": "TRANSACTION"}
    [listed] = [t for t in lines(cli("topic", "list", *server)) if t["topic"] == "TxOnly"]
    assert listed["attributes"] == {"message.type": "TRANSACTION"}
    [dropped] = lines(cli("topic", "create", *server, "--topic", "TxOnly",
                          "--attributes=-message.type"))
    assert dropped["attributes"] == {}
    bad_value = cli("topic", "create", *server, "--topic", "TxOnly", "-a", "+message.type=TX")
    assert bad_value.returncode != 0 and "message.type must be one of" in bad_value.stderr
    bad_key = cli("topic", "create", *server, "--topic", "TxOnly", "-a", "+queue.type=x")
    assert bad_key.returncode != 0 and "unsupported topic attribute 'queue.type'" in \
        bad_key.stderr
    bad_form = cli("topic", "create", *server, "--topic", "TxOnly", "-a", "message.type")
    assert bad_form.returncode == 2 and "+KEY=VALUE" in bad_form.stderr


@pytest.mark.timeout(90)
def test_bench_modes_report_rates_and_percentiles(broker: BrokerLiteServer) -> None:
    server = ("--server", broker.native)
    for mode, rate in (("send", "msgs_per_s"), ("tx", "tx_per_s"), ("consume", "msgs_per_s")):
        [report] = lines(cli("bench", *server, "--mode", mode, "--count", "300",
                             "--concurrency", "16", "--json"))
        assert report["mode"] == mode and report["done"] == 300 and report["errors"] == 0
        assert float(report[rate]) > 0  # type: ignore[arg-type]
        assert 0 < report["p50_ms"] <= report["p90_ms"] <= report["p99_ms"] <= report["max_ms"]  # type: ignore[operator]
    human = cli("bench", *server, "--count", "50")
    assert human.returncode == 0 and "msgs/s" in human.stdout and "p99" in human.stdout


@pytest.mark.parametrize("args", [
    ("send", "--server", "127.0.0.1:1", "--topic", "T"),  # neither --body nor --size
    ("send", "--server", "127.0.0.1:1", "--topic", "T", "--body", "x", "--size", "3"),
    ("send", "--server", "localhost", "--topic", "T", "--body", "x"),
    ("send", "--server", "127.0.0.1:1", "--topic", "T", "--count", "0", "--size", "1"),
    ("send", "--server", "127.0.0.1:1", "--topic", "T", "--body", "x", "--access-key", "a"),
    ("consume", "--server", "127.0.0.1:1", "--topic", "T"),  # no --group
    ("topic", "create", "--server", "127.0.0.1:1", "--topic", "T", "--perm", "9"),
    ("bench", "--server", "127.0.0.1:1", "--mode", "fly"),
])
@pytest.mark.timeout(30)
def test_bad_arguments_exit_2_with_a_message(args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert "error:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [
    ("send", "--topic", "T", "--body", "x"),
    ("consume", "--topic", "T", "--group", "g"),
    ("topic", "list"),
    ("bench", "--count", "1"),
])
@pytest.mark.timeout(30)
def test_unreachable_broker_is_one_line_and_exit_1(command: tuple[str, ...]) -> None:
    result = cli(*command, "--server", f"127.0.0.1:{free_port()}", "--request-timeout", "1")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "cannot connect to broker" in line and line.startswith("broker-lite ")


@pytest.mark.timeout(30)
def test_every_client_command_has_help() -> None:
    for command in (("send",), ("consume",), ("topic", "create"), ("topic", "list"),
                    ("bench",)):
        result = cli(*command, "--help")
        assert result.returncode == 0 and "--server" in result.stdout
