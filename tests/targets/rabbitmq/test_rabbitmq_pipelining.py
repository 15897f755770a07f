"""The RabbitMQ target under load: passes at once, big waves, confirms that never come.

Real parts only (PostgreSQL, a rabbitmq-server node, aio-pika). The target
writes a wave's publishes back to back and awaits their confirms together
(one ``broker_timeout`` for the wave), on the idlest of a few channels; these
tests hold it to the guarantees: a row is marked only on its own confirm,
each message group keeps its order, and nothing is lost or marked when the
node stops confirming.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, Relay, publish
from outbox.config import RelaySettings
from outbox.errors import ConfigurationError, RelayError
from outbox.models import transaction_table as t
from outbox.targets.base import HalfOutcome, HalfStored, OutgoingMessage
from outbox.targets.choose import publisher_for
from outbox.targets.rabbitmq import RabbitMQTarget
from outbox.targets.runner import TargetPublisher
from tests.support import wait_until
from tests.support.publishers import drain
from tests.support.rabbitmq_server import RabbitMQServer
from tests.targets.rabbitmq.rabbit_support import (
    Consumer,
    PublishingBlocked,
    processed,
    queue_depth,
    relayed_ids,
)


def _rows(topic: str, prefix: str, n: int) -> list[OutgoingMessage]:
    return [OutgoingMessage(f"{prefix}-{i}", topic, b'{"i": %d}' % i, None, (), None, {})
            for i in range(n)]


@pytest.mark.timeout(180)
def test_passes_at_once_publish_on_channels_of_their_own_and_each_row_is_confirmed(
        outbox: Outbox, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    publisher = publisher_for(outbox)
    assert isinstance(publisher, TargetPublisher)
    target = publisher.target
    assert isinstance(target, RabbitMQTarget)
    batches = [_rows(queue, f"lane{lane}", 300) for lane in range(3)]
    answers: dict[int, list[HalfOutcome]] = {}
    start = threading.Barrier(3)
    # Whether the passes overlap is the scheduler's business (a wave is one write now, and
    # a pass may be done before the next starts); what must hold is that no channel ever
    # carries two passes' waves at once. Every wave is watched on its way in and out.
    publishing: set[int] = set()
    shared: list[int] = []
    wave = target._publish_wave

    async def watched(channel: Any, rows: Any) -> Any:
        if id(channel) in publishing:
            shared.append(id(channel))
        publishing.add(id(channel))
        try:
            return await wave(channel, rows)
        finally:
            publishing.discard(id(channel))

    target._publish_wave = watched  # type: ignore[method-assign]

    def lane(n: int) -> None:
        start.wait(30)
        answers[n] = publisher.send_halves(batches[n])

    threads = [threading.Thread(target=lane, args=(n,)) for n in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        # the passes waited for one connection; those at once each took a channel of its own
        assert not shared, "two passes published on one channel at once"
        assert 1 <= target.open_channels <= 3
    finally:
        publisher.close()
    for n, batch in enumerate(batches):
        assert [type(a) for a in answers[n]] == [HalfStored] * len(batch)
        assert [a.tx_id for a in answers[n]] == [m.tx_id for m in batch]
    wait_until(lambda: queue_depth(rabbitmq_server.url, queue) == 900, timeout=30,
               message=lambda: f"queue holds {queue_depth(rabbitmq_server.url, queue)}")


def test_a_target_without_a_channel_is_refused_naming_the_setting(outbox: Outbox) -> None:
    with pytest.raises(ConfigurationError, match="channels must be >= 1, got 0") as caught:
        RabbitMQTarget(outbox, channels=0)
    assert caught.value.setting == "channels"


@pytest.mark.timeout(300)
def test_a_drain_in_lanes_keeps_every_message_groups_order(
        pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    outbox = Outbox(engine=pg_engine, broker=rabbitmq_server.url,
                    relay=RelaySettings(batch_size=150, drain_lanes=3))
    groups = [f"g{n}" for n in range(6)]
    order: dict[str, list[str]] = {g: [] for g in groups}
    loose: list[str] = []
    with Session(pg_engine) as session, session.begin():
        for i in range(600):  # interleaved in commit order, as a busy shop writes them
            group = groups[i % 7] if i % 7 < len(groups) else None
            tx_id = publish(session, queue, {"i": i}, outbox=outbox, message_group=group)
            (order[group] if group else loose).append(tx_id)

    report = drain(outbox, publisher_for(outbox))
    assert (report.relayed, report.failed, report.held_back) == (600, 0, 0)

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: len(c.deliveries) >= 600, timeout=120)
    assert sorted(consumer.deliveries) == sorted(loose + [tx for g in groups for tx in order[g]])
    for group, tx_ids in order.items():
        seen = [tx for tx in consumer.deliveries if tx in set(tx_ids)]
        assert seen == tx_ids, f"group {group} out of order"


@pytest.fixture
def blocked(rabbitmq_server: RabbitMQServer) -> Iterator[PublishingBlocked]:
    block = PublishingBlocked(rabbitmq_server)
    try:
        yield block
    finally:
        block.lift()


@pytest.mark.timeout(300)
def test_rows_the_node_never_confirms_are_not_marked_and_go_once_it_confirms_again(
        pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer,
        blocked: PublishingBlocked) -> None:
    outbox = Outbox(engine=pg_engine, broker=rabbitmq_server.url,
                    relay=RelaySettings(broker_timeout=3.0, lease_seconds=5.0))
    with Session(pg_engine) as session, session.begin():
        ids = [publish(session, queue, {"i": i}, outbox=outbox) for i in range(50)]

    blocked.apply()  # a memory alarm: the node stops reading what publishers send
    publisher = publisher_for(outbox)
    try:
        with pytest.raises(RelayError, match="no confirm within 3s"):
            Relay(outbox, publisher).run_once()
        with pg_engine.connect() as conn:
            rows = conn.execute(select(t.c.relayed_at, t.c.attempts, t.c.claimed_by)).all()
        # nothing marked without its confirm; an outage counts no attempt and frees the rows
        assert [(r.relayed_at, r.attempts, r.claimed_by) for r in rows] == [(None, 0, None)] * 50

        blocked.lift()

        def relayed_all() -> bool:
            Relay(outbox, publisher).drain()
            return relayed_ids(pg_engine) == set(ids)

        wait_until(relayed_all, timeout=120, interval=0.2, ignore=(RelayError,),
                   message=lambda: f"{len(set(ids) - relayed_ids(pg_engine))} rows not relayed")
    finally:
        publisher.close()

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: set(processed(pg_engine)) >= set(ids), timeout=120)
    assert sorted(processed(pg_engine)) == sorted(ids)  # each once, whatever the node kept
    assert set(consumer.deliveries) == set(ids)
