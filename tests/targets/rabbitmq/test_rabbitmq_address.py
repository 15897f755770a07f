"""amqp:// addresses, the extra, and a setup that can never work (one clear error each)."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy import create_engine

from outbox import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError
from outbox.targets.address import BrokerAddressError, parse_broker_address
from outbox.targets.choose import support_for
from tests.support import free_port
from tests.support.rabbitmq_server import RabbitMQServer


def _outbox(broker: str) -> Outbox:
    return Outbox(engine=create_engine("sqlite://"), broker=broker)


@pytest.mark.timeout(30)
def test_an_amqp_url_keeps_its_credentials_vhost_and_exchange_and_hides_the_password() -> None:
    address = parse_broker_address("amqp://app:s3cret@mq.example:5672/orders?exchange=events")
    assert (address.kind, address.endpoints, address.tls) == ("rabbitmq", (("mq.example", 5672),),
                                                              False)
    assert str(address) == "amqp://app:s3cret@mq.example:5672/orders?exchange=events"
    assert "s3cret" not in address.redacted() and "app:***@" in address.redacted()
    assert parse_broker_address("amqps://h:5671").tls
    assert str(_outbox("amqp://u:p@h:5672/%2F").target_address) == "amqp://u:p@h:5672/%2F"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("broker", "problem"), [
    ("amqp://h:5672,h2:5672", "exactly one HOST:PORT"),
    ("amqp://u:p@h/vhost", "no HOST:PORT"),
    ("amqp://@h:5672", "the user before '@' is empty"),
    ("amqp://h:99999", "1..65535"),
])
def test_a_bad_amqp_address_is_one_error_naming_the_setting(broker: str, problem: str) -> None:
    with pytest.raises(BrokerAddressError, match="broker = ") as caught:
        parse_broker_address(broker)
    assert problem in str(caught.value)


@pytest.mark.timeout(30)
def test_an_unknown_address_option_is_refused_by_name() -> None:
    outbox = _outbox("amqp://h:5672/?exchnge=events")
    with pytest.raises(ConfigurationError, match="unknown option 'exchnge'") as caught:
        support_for(outbox).publisher(outbox)
    assert caught.value.setting == "broker"


@pytest.mark.timeout(30)
def test_half_first_is_refused_on_rabbitmq_naming_mode() -> None:
    with pytest.raises(ConfigurationError, match="mode 'half_first' is not supported on "
                                                 "RabbitMQ") as caught:
        Outbox(engine=create_engine("sqlite://"), broker="amqp://h:5672", mode="half_first")
    assert caught.value.setting == "mode"


@pytest.mark.timeout(120)
def test_the_probe_refuses_wrong_credentials_and_reports_an_outage_and_takes_the_right_ones(
        rabbitmq_server: RabbitMQServer) -> None:
    good = rabbitmq_server.url
    wrong = good.replace("guest:guest@", "guest:wrong@")
    with pytest.raises(ConfigurationError, match="refused the credentials of user 'guest'") \
            as caught:
        support_for(_outbox(wrong)).probe(_outbox(wrong))
    assert "wrong" not in str(caught.value)  # the password never shows
    down = support_for(_outbox(good)).probe(_outbox(f"amqp://127.0.0.1:{free_port()}"))
    assert isinstance(down, BrokerUnreachableError)
    assert support_for(_outbox(good)).probe(_outbox(good)) is None


@pytest.mark.timeout(30)
def test_the_checker_has_nothing_to_answer_on_rabbitmq_says_so_and_returns_on_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    outbox = _outbox("amqp://app:s3cret@127.0.0.1:5672/")
    stop, ready = threading.Event(), threading.Event()
    stop.set()
    with caplog.at_level(logging.INFO, logger="rocketbox.checker"):
        support_for(outbox).serve_checkbacks(outbox, stop, ready.set, threads=1,
                                             retry_interval=1.0)
    assert ready.is_set()
    [line] = [r.getMessage() for r in caplog.records if r.name == "rocketbox.checker"]
    assert "no transactional half and no check-back" in line and "s3cret" not in line


@pytest.mark.timeout(120)
def test_the_access_key_and_secret_key_are_the_user_and_password_of_a_url_without_them(
        rabbitmq_server: RabbitMQServer) -> None:
    bare = rabbitmq_server.url.replace("guest:guest@", "")
    engine = create_engine("sqlite://")
    wrong = Outbox(engine=engine, broker=bare, access_key="guest", secret_key="wrong")
    right = Outbox(engine=engine, broker=bare, access_key="guest", secret_key="guest")
    assert "guest" not in right.broker  # nothing secret in the address the CLI prints
    with pytest.raises(ConfigurationError, match="refused the credentials of user 'guest'"):
        support_for(wrong).probe(wrong)
    assert support_for(right).probe(right) is None
