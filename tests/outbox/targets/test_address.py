"""The broker address: one parser, one clear error naming the setting."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from outbox import Outbox
from outbox.errors import ConfigurationError
from outbox.inbox import InboxConsumer
from outbox.targets.address import BrokerAddress, BrokerAddressError, parse_broker_address


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:10911", BrokerAddress("broker-lite", (("127.0.0.1", 10911),))),
    ("broker-lite://mq.local:10911", BrokerAddress("broker-lite", (("mq.local", 10911),))),
    ("rocketmq://p1:8081,p2:8081", BrokerAddress("rocketmq", (("p1", 8081), ("p2", 8081)))),
    ("rocketmqs://p1:8081", BrokerAddress("rocketmq", (("p1", 8081),), tls=True)),
    ("rocketmq://[::1]:8081", BrokerAddress("rocketmq", (("::1", 8081),))),
])
def test_addresses_parse(text: str, expected: BrokerAddress) -> None:
    assert parse_broker_address(text) == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("", "it is empty"),
    ("nohost", "endpoint 'nohost' has no HOST:PORT"),
    ("host:99999", "endpoint 'host:99999' has no port in 1..65535"),
    ("kafka://h:9092", "unknown scheme 'kafka'"),
    ("rocketmq://p1:8081,,p2:8081", "an endpoint is empty"),
    ("broker-lite://a:1,b:2", "broker_lite takes exactly one HOST:PORT"),
    ("rocketmq://p1:8081,p1:8081", "an endpoint is listed twice"),
])
def test_a_bad_address_names_the_setting(text: str, problem: str) -> None:
    with pytest.raises(BrokerAddressError) as caught:
        parse_broker_address(text, setting="ROCKETBOX_BROKER")
    assert str(caught.value).startswith(f"ROCKETBOX_BROKER = {text!r}: {problem}")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ConfigurationError)
    assert caught.value.setting == "ROCKETBOX_BROKER"


def test_outbox_keeps_broker_lite_native_and_knows_rocketmq() -> None:
    engine = create_engine("sqlite://")
    try:
        assert Outbox(engine=engine).target_address.kind == "broker-lite"
        assert Outbox(engine=engine, broker="broker-lite://h:1").broker == "h:1"
        rocketmq = Outbox(engine=engine, broker=" rocketmq://p1:8081,p2:8082 ")
        assert rocketmq.broker == "rocketmq://p1:8081,p2:8082"
        assert rocketmq.target_address.endpoint_strings() == ["p1:8081", "p2:8082"]
        with pytest.raises(BrokerAddressError, match=r"^broker = 'x'"):
            Outbox(engine=engine, broker="x")
    finally:
        engine.dispose()


def test_what_rocketmq_does_not_take_is_refused_at_configuration() -> None:
    engine = create_engine("sqlite://")
    try:
        with pytest.raises(ConfigurationError, match="mode 'half_first' is not supported"):
            Outbox(engine=engine, broker="rocketmq://p1:8081", mode="half_first")
        outbox = Outbox(engine=engine, broker="rocketmq://p1:8081")
        with pytest.raises(ConfigurationError, match=r"use outbox\.inbox_rocketmq\.RocketMQInbox"):
            InboxConsumer("Orders", "billing", lambda _s, _m: None, outbox=outbox)
    finally:
        engine.dispose()
