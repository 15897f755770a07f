"""A unit of work followed from its database row to every consumer that processed it.

The facts come from where they already are:

* the outbox row (written, claimed, attempts, last error, relayed) and the
  inbox rows of the groups that processed it, from the outbox's database and
  from each other database named with ``--inbox-db NAME=URL`` (a consumer's
  inbox often lives in its own service's database);
* from the broker's key index, every record carrying the ``tx_id`` (its
  unique key or transaction id): the half, the op records (each check-back
  sent, the resolution and whether it answered a check-back), the commit
  record on the real topic, retry and dead-letter copies, a discarded copy;
* each consumer group's committed offset on the commit's queue: past the
  commit's queue offset means the group has consumed it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from broker_lite.client import Admin, ReceivedMessage
from broker_lite.client.admin import names as n
from outbox.console.rows import body_views, inbox_rows, one_row

__all__ = ["Delivery", "Event", "Trace", "build_trace"]

_MAX_RECORDS = 256


@dataclass(frozen=True, slots=True)
class Event:
    """One step of the trace: when, where (``db`` or ``broker``), what."""

    at: datetime
    source: str
    kind: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    committed: int
    consumed: bool


@dataclass(slots=True)
class Trace:
    tx_id: str
    row: dict[str, Any] | None = None
    body: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    inbox: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    checks: int = 0
    broker_error: str | None = None
    #: the databases searched for inbox rows, and why one could not be read
    inbox_searched: list[str] = field(default_factory=list)
    inbox_errors: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.row is not None or bool(self.records)


def _ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, UTC)


def _row_events(row: dict[str, Any]) -> list[Event]:
    events = [Event(row["created_at"], "db", "row written",
                    f"topic {row['topic']}, seq {row['seq']}, state {row['state']}")]
    if row.get("claimed_by") and row.get("claimed_until"):
        events.append(Event(row["claimed_until"], "db", "claimed",
                            f"by {row['claimed_by']} until this time"))
    if (row["attempts"] or row.get("last_error")) and not row.get("relayed_at") \
            and not row["parked"]:
        events.append(Event(row["next_attempt_at"], "db", "attempts",
                            f"{row['attempts']} attempt(s); next at this time; last error: "
                            f"{row.get('last_error') or '-'}"))
    elif row["attempts"] > 1 or row.get("last_error"):
        events.append(Event(row["created_at"], "db", "attempts",
                            f"{row['attempts']} attempt(s) in all; last error: "
                            f"{row.get('last_error') or '-'}"))
    if row["parked"]:
        events.append(Event(row["next_attempt_at"], "db", "parked",
                            "used up its attempts; replay it from the rows page"))
    if row.get("relayed_at"):
        events.append(Event(row["relayed_at"], "db", "relayed",
                            f"half at {row.get('half_offset')}, commit at "
                            f"{row.get('commit_offset')}"))
    return events


def _record_event(msg: ReceivedMessage) -> tuple[Event, str]:
    """The event a stored record stands for, and its kind."""
    topic = msg.delivered_topic
    props = msg.properties
    at = _ms(msg.store_timestamp)
    if topic == n.HALF_TOPIC and props.get(n.TX_STATE) == "CHECK":  # a copy renewed by a check
        return Event(at, "broker", "check-back sent",
                     f"check #{props.get(n.TRANSACTION_CHECK_TIMES, '?')} to the producer "
                     "group"), "check"
    if topic == n.HALF_TOPIC:
        return Event(at, "broker", "half stored",
                     f"producer group {props.get(n.PGROUP, '?')}, real topic {msg.topic}, "
                     f"commit-log offset {msg.commit_log_offset}"), "half"
    if topic == n.OP_TOPIC:
        state = props.get(n.TX_STATE, "?")
        via = " (the producer's answer to a check-back)" if props.get(n.FROM_CHECK) else ""
        return Event(at, "broker", f"resolved {state}", f"op record{via}"), "op"
    if topic == n.TRANS_CHECK_MAX_TIME_TOPIC:
        return Event(at, "broker", "discarded",
                     f"after {props.get(n.TRANSACTION_CHECK_TIMES, '?')} check(s), to "
                     f"{n.TRANS_CHECK_MAX_TIME_TOPIC}"), "discarded"
    if topic.startswith(n.RETRY_PREFIX):
        return Event(at, "broker", "redelivery scheduled",
                     f"for group {topic[len(n.RETRY_PREFIX):]} (delivery "
                     f"#{msg.reconsume_times + 1})"), "retry"
    if topic.startswith(n.DLQ_PREFIX):
        return Event(at, "broker", "dead-lettered",
                     f"to {topic} after {msg.reconsume_times} deliveries"), "dlq"
    return Event(at, "broker", "committed (visible)",
                 f"{topic} queue {msg.queue_id} offset {msg.queue_offset}, commit-log offset "
                 f"{msg.commit_log_offset}"), "commit"


def _inbox(trace: Trace, engine: Engine | None,
           others: Sequence[tuple[str, Engine]]) -> None:
    sources = ([("outbox database", engine)] if engine is not None else []) + list(others)
    for name, source in sources:
        trace.inbox_searched.append(name)
        try:
            found = inbox_rows(source, trace.tx_id)
        except Exception as exc:  # another service's database may be down or unmigrated
            trace.inbox_errors.append(f"{name}: {type(exc).__name__}: "
                                      f"{str(exc).splitlines()[0]}")
            continue
        trace.inbox.extend({**row, "database": name} for row in found)
    trace.inbox.sort(key=lambda row: row["processed_at"])


def build_trace(engine: Engine | None, admin: Callable[[], Admin], tx_id: str, *,
                inbox_dbs: Sequence[tuple[str, Engine]] = ()) -> Trace:
    """Everything known about ``tx_id``; ``Trace.found`` is false when nothing is.

    ``admin`` gives the broker's admin client (it raises when the broker is down: the
    database half of the trace is still shown); ``inbox_dbs`` are the other databases
    searched for inbox rows.
    """
    trace = Trace(tx_id)
    _inbox(trace, engine, inbox_dbs)
    if engine is not None:
        trace.row = one_row(engine, tx_id)
        if trace.row is not None:
            trace.body = body_views(trace.row["body"])
            trace.events.extend(_row_events(trace.row))
    trace.events.extend(Event(i["processed_at"], "db", "processed (inbox row)",
                              f"by consumer group {i['group']} ({i['database']})")
                        for i in trace.inbox)
    commits: list[ReceivedMessage] = []
    try:
        client = admin()
        records = client.query_by_key(tx_id, _MAX_RECORDS)
        for msg in records:
            event, kind = _record_event(msg)
            trace.events.append(event)
            trace.checks += kind == "check"
            if kind == "commit":
                commits.append(msg)
            if not trace.body and kind in ("half", "commit"):
                trace.body = body_views(msg.body)
            trace.records.append({"kind": kind, "topic": msg.delivered_topic,
                                  "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
                                  "commit_log_offset": msg.commit_log_offset,
                                  "stored": event.at})
        if commits:
            offsets = client.consumer_groups().offsets
            for commit in commits:
                for off in offsets:
                    if off.topic == commit.topic and off.queue_id == commit.queue_id:
                        trace.deliveries.append(Delivery(
                            off.group, off.topic, off.queue_id, commit.queue_offset,
                            off.committed, off.committed > commit.queue_offset))
    except Exception as exc:  # the DB half of the trace is still worth showing
        trace.broker_error = f"{type(exc).__name__}: {exc}"
    trace.events.sort(key=lambda e: e.at)
    return trace
