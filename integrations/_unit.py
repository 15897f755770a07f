"""One decorated view call, framework-neutral: the messages it adds to its DB transaction.

The integrations (:mod:`integrations.flask`, :mod:`integrations.django`,
:mod:`integrations.fastapi`) open the view's database transaction
themselves and wrap the call in a :class:`UnitOfWork`; this module holds
what happens inside, so they behave the same (docs/integrations.md;
FastAPI runs it on the sync session under its ``AsyncSession``, see
docs/async.md):

* ``publish()`` inserts the status row at once, through the transaction's
  SQLAlchemy :class:`~sqlalchemy.Connection`, and returns its ``tx_id``;
* the decorator's ``body=`` function turns the view's return value into one
  more message (topic, tag, keys and message group from the decorator);
  in ``outbox`` mode that last row rides on the ``COMMIT`` where
  :mod:`outbox.at_commit` allows (Flask on PostgreSQL; Django's connection
  opts out, since Django commits it itself);
* before the commit, ``half_first`` mode sends a half for every message
  (carrying the PostgreSQL xid) and records its offset on the row;
* after the commit, ``outbox`` mode hands the ids to ``Outbox.on_commit``
  (the Celery relay task); ``half_first`` mode ends each transaction
  ``COMMIT`` (through the ``rocketbox.end_transaction`` task when there is a
  Celery app, else directly);
* after a rollback, nothing was committed, so the relay never sees a row;
  ``half_first`` mode ends the halves it sent ``ROLLBACK`` (the check-back
  would resolve them anyway).

The unit of work of the running view is kept in a :mod:`contextvars`
variable, so ``publish()`` needs no argument naming it, and it is per
thread and per task.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text, update
from sqlalchemy.orm import Session

from integrations.errors import HalfFirstError
from outbox.checkback_rules import PG_XID_PROPERTY
from outbox.config import Mode, Outbox
from outbox.ending import end_then_mark
from outbox.errors import ConfigurationError, NoTransactionError, OutboxError
from outbox.models import transaction_table as t
from outbox.publish import CURRENT_XID_SQL
from outbox.publish import publish as outbox_publish
from outbox.serializers import to_body
from outbox.sqla_core_commit import OPT_OUT
from outbox.targets import HalfOutcome, HalfStored, OutgoingMessage, Publisher, TxEnd, TxState

if TYPE_CHECKING:
    from celery import Celery

__all__ = [
    "HalfFirstError",
    "MessageSpec",
    "UnitOfWork",
    "current_unit",
    "error_status_rolls_back",
    "is_autocommit",
    "running",
    "session_connection",
]

log = logging.getLogger("rocketbox.integrations")

#: a decorator argument given either as a value or as a function of the view's return value
Derived = Any
_current: contextvars.ContextVar[UnitOfWork | None] = contextvars.ContextVar(
    "rocketbox_unit_of_work", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSpec:
    """What ``@transactional_message(...)`` was given.

    ``keys`` and ``message_group`` may be functions of the view's return
    value (used for the ``body=`` message only). ``mode`` ``None`` means the
    configured default.
    """

    topic: str | None = None
    tag: str | None = None
    keys: Derived = None
    message_group: Derived = None
    headers: Mapping[str, Any] | None = None
    mode: Mode | None = None
    body: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.mode not in (None, "outbox", "half_first"):
            raise ConfigurationError(f"mode must be 'outbox' or 'half_first', not {self.mode!r}")
        if self.body is not None and not callable(self.body):
            raise ConfigurationError("body= must be a function of the view's return value")
        if self.body is not None and not self.topic:
            raise ConfigurationError("body= needs topic=: the message has to go somewhere")


def is_autocommit(conn: Connection) -> bool:
    """Whether ``conn`` commits every statement by itself (then no unit of work can hold)."""
    level = (conn.get_execution_options().get("isolation_level")
             or getattr(conn.dialect, "_on_connect_isolation_level", None))
    if level == "AUTOCOMMIT":
        return True
    dbapi = conn.connection.dbapi_connection
    return getattr(dbapi, "autocommit", False) is True


def session_connection(session: Session) -> Callable[[], Connection]:
    """The session's connection, checked once, and looked up again only for a new transaction.

    ``Session.connection()`` is not free, and every ``publish()`` asks; the
    answer can only change when the session's (root) transaction does, for
    example after the view committed by itself. (Flask's session, and the
    sync session under FastAPI's ``AsyncSession``.)
    """
    known: list[tuple[object, Connection]] = []

    def connection() -> Connection:
        root = session.get_transaction()
        if root is None:
            raise NoTransactionError("the view's session has no open transaction")
        if known and known[0][0] is root:
            return known[0][1]
        conn = session.connection()
        if not known and is_autocommit(conn):
            raise ConfigurationError(
                "the database connection is in AUTOCOMMIT mode: rocketbox needs a "
                "transactional database, so that messages commit with the view's rows")
        known[:] = [(root, conn)]
        return conn

    return connection


def error_status_rolls_back(status: int, enabled: bool) -> bool:
    """Whether a response with ``status`` rolls the unit of work back (4xx and 5xx)."""
    return enabled and status >= 400


@dataclass
class _Sent:
    message: OutgoingMessage
    half_offset: int = -1
    queue_offset: int = -1


@dataclass
class UnitOfWork:
    """The messages of one view call; see the module doc for the life cycle.

    ``connection`` returns the view's SQLAlchemy connection, inside its open
    transaction (it raises :class:`NoTransactionError` when there is none).
    ``publisher`` gives the broker seam (``half_first`` mode only) and
    ``celery_app`` the app whose ``rocketbox.end_transaction`` task ends
    halves after the commit.
    """

    outbox: Outbox
    spec: MessageSpec
    connection: Callable[[], Connection]
    mode: Mode
    publisher: Callable[[], Publisher] | None = None
    celery_app: Celery | None = None
    #: the framework's session, when it has one (Flask)
    session: Session | None = None
    tx_ids: list[str] = field(default_factory=list)
    _messages: list[_Sent] = field(default_factory=list)

    # -- during the view -------------------------------------------------------------

    def publish(self, topic: str | None, body: Any, *, tag: str | None = None,
                keys: str | Sequence[str] | None = None, message_group: str | None = None,
                headers: Mapping[str, Any] | None = None) -> str:
        """Add a message to the view's transaction; the decorator's values fill the gaps."""
        topic = topic or self.spec.topic
        if not topic:
            raise ConfigurationError("publish() needs a topic (or topic= on the decorator)")
        spec_keys = None if callable(self.spec.keys) else self.spec.keys
        spec_group = None if callable(self.spec.message_group) else self.spec.message_group
        return self._write(topic, body, tag=tag if tag is not None else self.spec.tag,
                           keys=keys if keys is not None else spec_keys,
                           message_group=(message_group if message_group is not None
                                          else spec_group),
                           headers=headers if headers is not None else self.spec.headers)

    def publish_result(self, value: Any) -> str | None:
        """The ``body=`` message for the view's return value, if the decorator has one."""
        if self.spec.body is None or self.spec.topic is None:
            return None
        body = self.spec.body(value)
        keys = self.spec.keys(value) if callable(self.spec.keys) else self.spec.keys
        group = (self.spec.message_group(value) if callable(self.spec.message_group)
                 else self.spec.message_group)
        return self._write(self.spec.topic, body, tag=self.spec.tag, keys=keys,
                           message_group=group, headers=self.spec.headers,
                           at_commit=self.mode == "outbox")

    def _write(self, topic: str, body: Any, *, tag: str | None,
               keys: str | Sequence[str] | None, message_group: str | None,
               headers: Mapping[str, Any] | None, at_commit: bool = False) -> str:
        conn = self.connection()
        conn.execution_options(**{OPT_OUT: False})  # after_commit() calls on_commit itself
        data = to_body(body, self.outbox.serializer)
        tx_id = outbox_publish(conn, topic, data, outbox=self.outbox, tag=tag, keys=keys,
                               message_group=message_group, headers=headers,
                               at_commit=at_commit)
        self.tx_ids.append(tx_id)
        if self.mode == "half_first":
            key_list = (keys.split() if isinstance(keys, str) else list(keys or ()))
            properties = {str(k): str(v) for k, v in (headers or {}).items()}
            self._messages.append(_Sent(OutgoingMessage(
                tx_id=tx_id, topic=topic, body=data, tag=tag, keys=tuple(key_list),
                message_group=message_group, properties=properties)))
        return tx_id

    # -- around the commit -----------------------------------------------------------

    def before_commit(self) -> None:
        """``half_first``: send the halves now, and record them on the rows."""
        outgoing = self.halves_to_send()
        if outgoing:
            self.record_halves(self.send_halves(outgoing))

    # The three steps of before_commit, for a caller that must not block on the broker
    # where it reads the database (FastAPI: the network step runs off the event loop).

    def halves_to_send(self) -> list[OutgoingMessage]:
        """``half_first``: the halves of this transaction's messages (database: its xid)."""
        if self.mode != "half_first" or not self._messages:
            return []
        if self.publisher is None:
            raise ConfigurationError("half_first mode needs a broker publisher")
        conn = self.connection()
        xid: int | None = None
        if conn.dialect.name == "postgresql":
            xid = conn.execute(text(f"SELECT {CURRENT_XID_SQL}")).scalar()
        outgoing = []
        for sent in self._messages:
            properties = dict(sent.message.properties)
            if xid is not None:
                properties[PG_XID_PROPERTY] = str(xid)
            outgoing.append(OutgoingMessage(
                tx_id=sent.message.tx_id, topic=sent.message.topic, body=sent.message.body,
                tag=sent.message.tag, keys=sent.message.keys,
                message_group=sent.message.message_group, properties=properties))
        return outgoing

    def send_halves(self, outgoing: list[OutgoingMessage]) -> list[HalfOutcome]:
        """Send ``outgoing`` to the broker (no database)."""
        assert self.publisher is not None  # halves_to_send refused that
        try:
            return self.publisher().send_halves(outgoing)
        except OutboxError as exc:
            raise HalfFirstError(f"could not send the half message(s): {exc}") from exc

    def record_halves(self, results: list[HalfOutcome]) -> None:
        """Record each half on its row (database); a refused half ends the others."""
        conn = self.connection()
        later = datetime.now(UTC) + timedelta(seconds=self.outbox.relay.sweep_after)
        for sent, result in zip(self._messages, results, strict=True):
            if isinstance(result, Exception):
                self._rollback_sent()
                raise HalfFirstError(f"the broker refused the half of {sent.message.tx_id}: "
                                     f"{result}", tx_id=sent.message.tx_id) from result
            sent.half_offset, sent.queue_offset = result.half_offset, result.queue_offset
            # The relay is the backup for the end-transaction after the commit: it
            # holds off for sweep_after, then re-ends it (idempotently) if needed.
            conn.execute(update(t).where(t.c.tx_id == sent.message.tx_id).values(
                half_offset=result.half_offset, next_attempt_at=later))

    def after_commit(self) -> None:
        """Hand the committed ids on: the relay task, or the halves' end-transaction."""
        if not self.tx_ids:
            return
        if self.mode == "outbox":
            hook = self.outbox.on_commit
            if hook is None:
                return
            try:
                hook(list(self.tx_ids))
            except Exception:  # never into the response: the sweeper relays the rows
                log.exception("on_commit hook failed for %d message(s); the sweeper will "
                              "relay them", len(self.tx_ids))
            return
        self._end_all("COMMIT")

    def after_rollback(self) -> None:
        """The transaction rolled back: end whatever halves were sent ``ROLLBACK``."""
        if self.mode == "half_first":
            self._rollback_sent()

    def _rollback_sent(self) -> None:
        self._end_all("ROLLBACK")

    def _end_all(self, state: TxState) -> None:
        """End every half that was sent (``half_offset`` known) with ``state``."""
        ends = [TxEnd(HalfStored(s.message.tx_id, s.message.topic, s.half_offset,
                                 s.queue_offset), state)
                for s in self._messages if s.half_offset >= 0]
        publisher = self.publisher
        end_then_mark(self.outbox, ends,
                      None if publisher is None else lambda e: publisher().end_transactions(e),
                      celery_app=self.celery_app)


@contextlib.contextmanager
def running(unit: UnitOfWork) -> Iterator[UnitOfWork]:
    """Make ``unit`` the current unit of work while inside."""
    token = _current.set(unit)
    try:
        yield unit
    finally:
        _current.reset(token)


def current_unit() -> UnitOfWork:
    """The unit of work of the running decorated view, or :class:`NoTransactionError`."""
    unit = _current.get()
    if unit is None:
        raise NoTransactionError("no @transactional_message view is running")
    return unit
