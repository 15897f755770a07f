"""The NATS JetStream target against a real nats-server (issue 32's "done when", NATS half).

* a commit gives exactly one message, consumed once through the inbox; a
  rollback gives none; a re-sent row is a duplicate the stream drops;
* a consumer that dies between its commit and its ack gets the message
  again, and the inbox skips it;
* per message group, the stream keeps commit order;
* a stream whose duplicate window is shorter than the relay's longest retry
  is refused (naming ``duplicate_window``) until it is fixed, and a topic
  without a stream is refused naming its subject; nothing is lost meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from outbox import Outbox, Relay
from outbox.inbox_nats import NatsInbox
from outbox.models import transaction_table as t
from outbox.publish import publish
from outbox.targets.choose import publisher_for
from outbox.targets.nats_stream import longest_retry
from tests.support import PostgresServer
from tests.support.nats_server import NatsServer
from tests.support.outbox_db import pg_outbox_database
from tests.support.waiting import wait_until
from tests.targets.nats.nats_support import (
    committed,
    consume,
    create_stream,
    fast_relay,
    relayed,
    row_errors,
    run,
    stored,
)

RELAY = fast_relay()


@pytest.fixture
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    with pg_outbox_database(postgres_server, "nats", pool_size=5) as (engine, _url):
        yield engine


def drain(outbox: Outbox) -> None:
    publisher = publisher_for(outbox)
    try:
        Relay(outbox, publisher).drain()
    finally:
        publisher.close()


def _seen(engine: Engine, group: str) -> list[str]:
    from sqlalchemy import select

    from outbox.models import inbox_table

    with engine.connect() as conn:
        return list(conn.execute(select(inbox_table.c.tx_id)
                                 .where(inbox_table.c.consumer_group == group)).scalars())


@pytest.mark.timeout(120)
def test_commit_gives_one_message_consumed_once_rollback_none_resend_dropped(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "ORDERS1", ["Orders1"], RELAY)
    with Session(engine) as session, session.begin():
        first = publish(session, "Orders1", {"n": 1}, outbox=outbox, tag="created",
                        keys=["k1", "k2"], headers={"traceparent": "00-ab-cd-01"})
        second = publish(session, "Orders1", {"n": 2}, outbox=outbox, message_group="cust.42")
    with Session(engine) as session, session.begin() as tx:
        never = publish(session, "Orders1", {"n": "never"}, outbox=outbox)
        tx.rollback()

    drain(outbox)

    messages = stored(nats_server.url, "ORDERS1")
    assert [m.tx_id for m in messages] == [first, second]
    by_id = {m.tx_id: m for m in messages}
    assert by_id[first].subject == "Orders1" and json.loads(by_id[first].body) == {"n": 1}
    assert by_id[first].headers["Rocketbox-Tag"] == "created"
    assert by_id[first].headers["Rocketbox-Keys"] == "k1 k2"
    assert by_id[first].headers["traceparent"] == "00-ab-cd-01"
    assert by_id[second].subject == "Orders1.cust%2E42"
    assert by_id[second].headers["Rocketbox-Message-Group"] == "cust.42"
    assert never not in by_id
    assert relayed(engine) == {first, second}

    # a re-send (the row as it was before its first pass, as after a relay crash between
    # the ack and the mark): the stream drops it
    with engine.begin() as conn:
        conn.execute(update(t).where(t.c.tx_id == first).values(relayed_at=None,
                                                                  half_offset=None))
    drain(outbox)
    assert [m.tx_id for m in stored(nats_server.url, "ORDERS1")] == [first, second]
    assert relayed(engine) == {first, second}
    with engine.connect() as conn:  # the duplicate's ack names the first copy's place
        positions = {tx: at for tx, at in conn.execute(select(t.c.tx_id, t.c.broker_position))}
        assert positions == {first: "ORDERS1:1", second: "ORDERS1:2"}

    handled: list[str] = []
    inbox = NatsInbox("billing", lambda _s, msg: handled.append(msg.headers["Nats-Msg-Id"]),
                      outbox=outbox)
    consume(nats_server.url, "ORDERS1", "billing", inbox,
            until=lambda: inbox.counts["processed"] >= 2, timeout=60)
    assert sorted(handled) == sorted([first, second])
    assert sorted(_seen(engine, "billing")) == sorted([first, second])


@pytest.mark.timeout(120)
def test_a_consumer_dying_between_its_commit_and_its_ack_processes_once(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "ORDERS2", ["Orders2"], RELAY)
    ids = committed(outbox, "Orders2", 3)
    drain(outbox)
    handled: list[str] = []
    inbox = NatsInbox("shipping", lambda _s, msg: handled.append(msg.headers["Nats-Msg-Id"]),
                      outbox=outbox)
    crashed: list[str] = []

    def commit_without_ack(msg: object) -> bool:
        """The first delivery of the first row: the handler commits, the ack never goes."""
        key = msg.headers["Nats-Msg-Id"]  # type: ignore[attr-defined]
        if key == ids[0] and not crashed:
            crashed.append(key)
            assert inbox.handle(msg)
            return False
        return True

    consume(nats_server.url, "ORDERS2", "shipping", inbox, ack_wait=1.0,
            on_message=commit_without_ack,
            until=lambda: inbox.counts["duplicates"] >= 1 and inbox.counts["processed"] >= 3,
            timeout=60)
    assert sorted(handled) == sorted(ids)  # once each, though ids[0] came twice
    assert inbox.counts == {"processed": 3, "duplicates": 1, "failed": 0}


@pytest.mark.timeout(120)
def test_each_message_group_keeps_commit_order_in_the_stream(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "ORDERS3", ["Orders3"], RELAY)
    groups = {g: [] for g in ("a", "b", "c")}  # type: dict[str, list[str]]
    for i in range(12):
        with Session(engine) as session, session.begin():
            for g, ids in groups.items():
                ids.append(publish(session, "Orders3", {"i": i}, outbox=outbox,
                                   message_group=g))
            publish(session, "Orders3", {"i": i}, outbox=outbox)
    drain(outbox)
    messages = stored(nats_server.url, "ORDERS3")
    assert len(messages) == 48 and len({m.tx_id for m in messages}) == 48
    for g, ids in groups.items():
        assert [m.tx_id for m in messages if m.subject == f"Orders3.{g}"] == ids


@pytest.mark.timeout(120)
def test_a_refused_row_holds_back_the_rest_of_its_group_and_no_other(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "ORDERS4", ["Orders4"], RELAY)
    ids: dict[str, list[str]] = {"a": [], "b": []}
    for i in range(4):
        with Session(engine) as session, session.begin():
            for g in ids:
                bad = g == "a" and i == 1  # a header JetStream would read as its own
                ids[g].append(publish(session, "Orders4", {"i": i}, outbox=outbox,
                                      message_group=g,
                                      headers={"Nats-Expected-Last-Sequence": "1"} if bad
                                      else None))
    publisher = publisher_for(outbox)
    try:
        # a0's message is out in the first pass, but its row waits with its group while
        # a1 is retried; once a1 is parked, a0's re-send is a duplicate and it is marked
        wait_until(lambda: Relay(outbox, publisher).drain() is not None
                   and relayed(engine) == {ids["a"][0], *ids["b"]},
                   timeout=60, message=lambda: f"relayed: {relayed(engine)}")
    finally:
        publisher.close()
    messages = stored(nats_server.url, "ORDERS4")
    assert [m.tx_id for m in messages if m.subject == "Orders4.b"] == ids["b"]
    assert [m.tx_id for m in messages if m.subject == "Orders4.a"] == ids["a"][:1]
    assert "names starting 'Nats-' are JetStream's" in str(row_errors(engine)[ids["a"][1]])


@pytest.mark.timeout(120)
def test_a_short_duplicate_window_or_no_stream_refuses_the_topic_until_fixed(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    needed = longest_retry(RELAY)
    create_stream(nats_server.url, "SHORT", ["Short"], RELAY, duplicate_window=needed / 2)
    short = committed(outbox, "Short", 2)
    lost = committed(outbox, "Nowhere", 1)
    publisher = publisher_for(outbox)
    try:
        report = Relay(outbox, publisher).run_once()
        assert report.relayed == 0 and report.failed == 3
        errors = row_errors(engine)
        for tx_id in short:
            assert "duplicate_window" in str(errors[tx_id]) and "'SHORT'" in str(errors[tx_id])
        assert "no JetStream stream takes subject 'Nowhere'" in str(errors[lost[0]])
        assert stored(nats_server.url, "SHORT") == []

        async def widen(js: object) -> None:
            info = await js.stream_info("SHORT")  # type: ignore[attr-defined]
            info.config.duplicate_window = needed + 1
            await js.update_stream(info.config)  # type: ignore[attr-defined]

        run(nats_server.url, widen)
        with engine.begin() as conn:  # due now rather than after the backoff
            conn.execute(update(t).values(next_attempt_at=t.c.created_at))
        Relay(outbox, publisher).drain()
    finally:
        publisher.close()
    assert [m.tx_id for m in stored(nats_server.url, "SHORT")] == short
    assert relayed(engine) == set(short)


@pytest.mark.timeout(120)
def test_the_start_up_probe_names_a_server_without_jetstream_and_returns_an_outage(
        nats_server: NatsServer) -> None:
    from outbox.errors import BrokerUnreachableError, ConfigurationError
    from outbox.targets.choose import support_for
    from tests.support.nats_server import start_nats
    from tests.support.servers import free_port

    def outbox_at(url: str) -> Outbox:
        from sqlalchemy import create_engine

        return Outbox(engine=create_engine("sqlite://"), broker=url, relay=RELAY)

    assert support_for(outbox_at(nats_server.url)).probe(outbox_at(nats_server.url)) is None
    down = outbox_at(f"nats://127.0.0.1:{free_port()}")
    assert isinstance(support_for(down).probe(down), BrokerUnreachableError)
    with start_nats(jetstream=False) as plain:
        no_js = outbox_at(plain.url)
        with pytest.raises(ConfigurationError, match=r"JetStream is not enabled .* -js"):
            support_for(no_js).probe(no_js)


@pytest.mark.timeout(120)
def test_a_failing_handler_naks_and_the_redelivery_is_processed_once(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "ORDERS5", ["Orders5"], RELAY)
    ids = committed(outbox, "Orders5", 2)
    drain(outbox)
    calls: list[str] = []

    def flaky(_session: Session, msg: object) -> None:
        key = msg.headers["Nats-Msg-Id"]  # type: ignore[attr-defined]
        calls.append(key)
        if calls.count(key) == 1 and key == ids[0]:
            raise RuntimeError("the first try fails")

    inbox = NatsInbox("flaky", flaky, outbox=outbox, nak_delay=0.2)
    consume(nats_server.url, "ORDERS5", "flaky", inbox,
            until=lambda: inbox.counts["processed"] >= 2, timeout=60)
    assert inbox.counts == {"processed": 2, "duplicates": 0, "failed": 1}
    assert calls.count(ids[0]) == 2 and calls.count(ids[1]) == 1
    assert sorted(_seen(engine, "flaky")) == sorted(ids)  # the failed try left no inbox row


@pytest.mark.timeout(60)
def test_the_checker_on_nats_has_nothing_to_answer_and_stops_when_told(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import threading

    from sqlalchemy import create_engine

    from outbox.targets.choose import support_for

    outbox = Outbox(engine=create_engine("sqlite://"), broker="nats://127.0.0.1:4222")
    stop, ready = threading.Event(), threading.Event()
    caplog.set_level(logging.INFO, logger="rocketbox.checker")
    worker = threading.Thread(target=support_for(outbox).serve_checkbacks,
                              args=(outbox, stop, ready.set),
                              kwargs={"threads": 1, "retry_interval": 1.0})
    worker.start()
    assert ready.wait(30)
    stop.set()
    worker.join(30)
    assert not worker.is_alive()
    assert "no half messages and no check-backs: nothing to answer" in caplog.text
