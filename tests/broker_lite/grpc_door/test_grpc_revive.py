"""The broker revives what a group received and never settled, polled or not, and a
``kill -9`` loses none of it (``pop.json``). Official client, ``broker-lite serve``.

The broker runs with ``--grpc-max-delivery-attempts 3``; its revive round runs every second.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.broker_lite.grpc_door.grpc_support import (
    StartGrpcBroker,
    receive,
    running,
    send_bodies,
    simple_consumer,
)
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.grpc


def _deliver_until_last(endpoint: str, group: str, topic: str, msg_id: str, *,
                        last_invisible: int) -> None:
    """Receive ``msg_id`` three times without acking; the last delivery hides it that long."""
    with running(simple_consumer(endpoint, group, topic)) as consumer:
        for attempt in (1, 2, 3):
            invisible = last_invisible if attempt == 3 else 1
            (msg,) = receive(consumer, 1, invisible=invisible, ack=False)
            assert (msg.message_id, msg.delivery_attempt) == (msg_id, attempt)


def _dead_letters(endpoint: str, group: str, count: int) -> list[str]:
    with running(simple_consumer(endpoint, "janitors", f"%DLQ%{group}")) as dlq:
        return [msg.message_id for msg in receive(dlq, count, timeout=30)]


def _in_flight(data_dir: Path) -> dict[str, int]:
    """msg id -> deliveries, as the broker last saved them."""
    try:
        records = json.loads((data_dir / "pop.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {r["id"]: r["n"] for r in records}


@pytest.mark.timeout(60)
def test_a_dead_letter_does_not_wait_for_its_group_to_poll(
        grpc_broker: BrokerLiteServer) -> None:
    (sent,) = send_bodies(grpc_broker.grpc, "Abandoned", "poison")
    _deliver_until_last(grpc_broker.grpc, "gone", "Abandoned", sent, last_invisible=1)
    # the group never polls again: the broker moves it on its own
    assert _dead_letters(grpc_broker.grpc, "gone", 1) == [sent]


@pytest.mark.timeout(90)
def test_in_flight_messages_survive_a_kill_9(start_grpc_broker: StartGrpcBroker,
                                             tmp_path: Path) -> None:
    data = tmp_path / "broker"
    with start_grpc_broker(data_dir=data) as broker:
        (poison,) = send_bodies(broker.grpc, "Crashy", "poison")
        _deliver_until_last(broker.grpc, "workers", "Crashy", poison, last_invisible=4)
        (job,) = send_bodies(broker.grpc, "Crashy", "job")
        with running(simple_consumer(broker.grpc, "workers", "Crashy")) as consumer:
            (held,) = receive(consumer, 1, invisible=4, ack=False)
        assert (held.message_id, held.delivery_attempt) == (job, 1)
        wait_until(lambda: _in_flight(data) == {poison: 3, job: 1}, timeout=10,
                   message=lambda: f"pop.json holds {_in_flight(data)}")
        broker.kill()
    with start_grpc_broker(data_dir=data) as broker:
        # nobody polls "workers": the revive moves the poison once its 4 s are over
        wait_until(lambda: "%DLQ%workers" in (data / "topics.json").read_text(), timeout=20,
                   message=lambda: f"no DLQ topic; broker log:\n{broker.stderr_text()[-2000:]}")
        assert _dead_letters(broker.grpc, "workers", 1) == [poison]
        with running(simple_consumer(broker.grpc, "workers", "Crashy")) as consumer:
            (again,) = receive(consumer, 1, invisible=10)
        assert (again.message_id, again.delivery_attempt) == (job, 2)
        log = broker.stderr_text()
    assert "Traceback" not in log, log[-4000:]
