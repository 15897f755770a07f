"""The relay's record statements: a pass's outcome written on its rows (PostgreSQL).

:mod:`outbox.relay` marks the rows a pass relayed in one ``UPDATE`` joined
to the rows' JSON (``[tx_id, half offset, commit offset(, position)]`` each):
:data:`RECORD_PG`, fenced on the claim, and :data:`RECORD_PG_READ` for rows
relayed without a claim (:meth:`~outbox.relay.Relay.relay_read`), fenced on
no live claim. :func:`psycopg_record` gives the latter as the leading
listener sends it on its own connection (:mod:`outbox.celery.listen`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import msgspec
from sqlalchemy import (
    BigInteger,
    Text,
    any_,
    bindparam,
    cast,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSON

from outbox.claims import ClaimedRow
from outbox.models import transaction_table as t
from outbox.relay_ends import Ended
from outbox.targets.base import HalfStored

__all__ = ["RECORD_PG", "RECORD_PG_POSITIONS", "RECORD_PG_READ", "RECORD_PG_READ_POSITIONS",
           "encode_rows", "psycopg_record", "read_record"]

#: a pass's relayed rows, one JSON array of ``[tx_id, half offset, commit offset(,
#: position)]`` each: msgspec encodes it in C, where psycopg dumps a Python list into an
#: array parameter item by item in Python (a tenth of the relay worker's time, with three
#: such arrays a pass; bench/relay.py --profile)
_ROWS_JSON = cast(bindparam("b_rows", type_=Text), JSON)
_RELAYED = func.json_array_elements(_ROWS_JSON).table_valued("value").render_derived(
    name="relayed")
_FIELD = [_RELAYED.c.value.op("->>")(literal_column(str(i))) for i in range(4)]
_IDS = func.json_array_elements(_ROWS_JSON).table_valued("value").render_derived(name="ids")
#: the rows' ids as an array: ``tx_id = ANY(...)`` walks the primary key. Without it,
#: where the statistics say no row is claimed (most rows relayed: an analyzed production
#: table), PostgreSQL read the whole table for ``claimed_by`` and compared every one of
#: the pass's rows against each: 40,000 comparisons for a pass of 200 (EXPLAIN ANALYZE on
#: 20,000 rows: 47-70 ms for the record, 8 ms with it)
_BY_ID = t.c.tx_id == any_(func.array(
    select(_IDS.c.value.op("->>")(literal_column("0"))).scalar_subquery()))
#: PostgreSQL: mark a pass's relayed rows in one statement, fenced on ``claimed_by``
RECORD_PG = update(t).where(_BY_ID, t.c.tx_id == _FIELD[0],
                             t.c.claimed_by == bindparam("b_me")).values(
    relayed_at=bindparam("b_now"), claimed_by=None, claimed_until=None, last_error=None,
    half_offset=cast(_FIELD[1], BigInteger), commit_offset=cast(_FIELD[2], BigInteger))
#: the same, with where the broker put each row (a target that names positions: TxEnded)
RECORD_PG_POSITIONS = RECORD_PG.values(broker_position=_FIELD[3])
encode_rows = msgspec.json.Encoder().encode
#: the record of rows relayed unclaimed (``Relay.relay_read``): fenced on no live claim
#: (a relay that claimed the row since records it itself). A row another relay recorded
#: first keeps its time; its offsets are the same (one half and one commit per tx_id).
#: No ``relayed_at IS NULL`` in the WHERE: it matches a partial index's predicate, which
#: PostgreSQL then walked, dead entries and all, instead of the primary key
RECORD_PG_READ = update(t).where(
    _BY_ID, t.c.tx_id == _FIELD[0],
    or_(t.c.claimed_until.is_(None), t.c.claimed_until < bindparam("b_now"))).values(
    relayed_at=func.coalesce(t.c.relayed_at, bindparam("b_now")), claimed_by=None,
    claimed_until=None, last_error=None,
    half_offset=cast(_FIELD[1], BigInteger), commit_offset=cast(_FIELD[2], BigInteger))
RECORD_PG_READ_POSITIONS = RECORD_PG_READ.values(broker_position=_FIELD[3])


def read_record(rows: list[ClaimedRow], halves: dict[str, HalfStored], ended: Ended
                 ) -> tuple[Any, dict[str, Any]]:
    """``Relay.relay_read``'s record: one ``UPDATE`` (as ``Relay._record_relayed``'s) and
    its parameters."""
    positions = ended.positions
    relayed: list[tuple[Any, ...]] = [
        (r.tx_id, halves[r.tx_id].half_offset, ended.commit_offsets.get(r.tx_id))
        for r in rows]
    if positions:
        relayed = [(*r, positions.get(r[0])) for r in relayed]
    return (RECORD_PG_READ_POSITIONS if positions else RECORD_PG_READ,
            {"b_now": datetime.now(UTC), "b_rows": encode_rows(relayed).decode()})


@functools.cache
def _psycopg_sql(statement: Any) -> tuple[str, dict[str, Any]]:
    """``statement`` compiled for psycopg 3 (the listener's own connection), once."""
    from sqlalchemy.dialects.postgresql.psycopg import dialect

    compiled = statement.compile(dialect=dialect())  # type: ignore[no-untyped-call]
    return str(compiled), dict(compiled.params)


def psycopg_record(statement: Any, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    sql, compiled = _psycopg_sql(statement)
    return sql, {**compiled, **params}
