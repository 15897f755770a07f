"""The NATS target's rules without a server: address, subjects, duplicate window, headers,
the extra, the modes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from outbox import Outbox, RelaySettings
from outbox.errors import ConfigurationError, RowFault, RowRefusedError
from outbox.targets.address import parse_broker_address
from outbox.targets.base import OutgoingMessage
from outbox.targets.nats_stream import (
    StreamFacts,
    longest_retry,
    stream_problem,
    stream_settings,
    subject_for,
)
from tests.test_extras import run_without, stderr_lines


def test_nats_and_tls_addresses_parse_and_print_back() -> None:
    plain = parse_broker_address("nats://127.0.0.1:4222,10.0.0.2:4223")
    assert plain.kind == "nats" and not plain.tls
    assert plain.endpoints == (("127.0.0.1", 4222), ("10.0.0.2", 4223))
    assert str(plain) == "nats://127.0.0.1:4222,10.0.0.2:4223"
    secure = parse_broker_address("tls://nats.example:4222")
    assert secure.kind == "nats" and secure.tls and str(secure) == "tls://nats.example:4222"
    with pytest.raises(ConfigurationError, match="nats://HOST:PORT"):
        parse_broker_address("nats://no-port")


def test_half_first_is_refused_on_nats_naming_mode() -> None:
    with pytest.raises(ConfigurationError, match="mode 'half_first' is not supported on NATS"):
        Outbox(engine=create_engine("sqlite://"), broker="nats://127.0.0.1:4222",
               mode="half_first")


def test_subjects_keep_a_group_in_one_token() -> None:
    assert subject_for("Orders", None) == "Orders"
    assert subject_for("Orders", "c-42_x") == "Orders.c-42_x"
    assert subject_for("Orders", "a.b *>%") == "Orders.a%2Eb%20%2A%3E%25"
    assert subject_for("Orders", "é") == "Orders.%C3%A9"
    assert stream_settings("S", ["Orders"], RelaySettings())["subjects"] == ["Orders",
                                                                             "Orders.>"]


def test_the_duplicate_window_must_outlast_the_longest_retry() -> None:
    default = RelaySettings()
    # lease 30 + (0.5 + 1 + ... + 128) * 1.2 backoff + 10 attempts * 10 s
    assert longest_retry(default) == pytest.approx(30 + 255.5 * 1.2 + 100)
    assert stream_settings("S", ["T"], default)["duplicate_window"] == 480.0
    assert stream_problem(StreamFacts("S", 480.0, "file"), default) is None
    problem = stream_problem(StreamFacts("S", 120.0, "file"), default)  # nats' default 2m
    assert problem is not None and "duplicate_window is 120s" in problem
    assert "437s" in problem and "--dupe-window 8m" in problem


def test_a_property_jetstream_would_read_as_its_own_refuses_the_row() -> None:
    from outbox.targets.nats import headers_for

    def msg(properties: dict[str, str]) -> OutgoingMessage:
        return OutgoingMessage(tx_id="T1", topic="Orders", body=b"{}", tag="t", keys=("k",),
                               message_group=None, properties=properties)

    refused = headers_for(msg({"nats-msg-id": "other"}))
    assert isinstance(refused, RowRefusedError) and refused.kind is RowFault.ROW_INVALID
    assert "'nats-msg-id'" in str(refused)
    assert isinstance(headers_for(msg({"a b": "1"})), RowRefusedError)
    assert isinstance(headers_for(msg({"x": "two\nlines"})), RowRefusedError)
    assert headers_for(msg({"trace": "1"})) == {"trace": "1", "Rocketbox-Tag": "t",
                                                "Rocketbox-Keys": "k", "Nats-Msg-Id": "T1"}


@pytest.mark.timeout(200)
def test_choosing_the_nats_target_without_the_extra_says_which_extra(tmp_path: Path) -> None:
    code = ("from sqlalchemy import create_engine\n"
            "from outbox import Outbox\n"
            "from outbox.errors import ConfigurationError\n"
            "from outbox.targets.choose import publisher_for\n"
            "outbox = Outbox(engine=create_engine('sqlite://'), broker='nats://127.0.0.1:1')\n"
            "try:\n"
            "    publisher_for(outbox)\n"
            "except ConfigurationError as exc:\n"
            "    print(exc)\n")
    done = run_without(("nats",), code, tmp_path)
    assert done.returncode == 0, stderr_lines(done)
    assert done.stdout.strip() == ("the NATS JetStream target needs the 'nats' extra: "
                                   "pip install 'rocketbox[nats]'")
