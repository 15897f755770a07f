"""Un-park rows: give parked rows a fresh set of relay attempts.

The relay parks a row after ``RelaySettings.max_attempts`` failures; a parked
row is never tried again by itself, and it holds back the later rows of its
message group. :func:`replay` puts rows back in the queue:

* ``parked = false``, ``attempts = 0`` (the full attempt budget again),
  ``next_attempt_at = now``, and any claim cleared;
* ``last_error`` is **kept**: it says why the row was parked until the next
  attempt either clears it (success) or replaces it (another failure). Each
  replayed row is also logged (``tx_id``, attempts, last error), so the
  history survives in the logs.

The relay's sweeper picks the rows up on its next beat. Only parked,
unrelayed rows change; ids that are unknown, not parked or already relayed
are reported back untouched. One short transaction does it all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select, update

from outbox.models import transaction_table as t
from outbox.status import PARKED

__all__ = ["ReplayResult", "replay"]

log = logging.getLogger("rocketbox.replay")
_CHUNK = 500  # ids per IN (...) list


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What :func:`replay` did with each id it was given."""

    replayed: tuple[str, ...] = ()
    not_parked: tuple[str, ...] = ()
    already_relayed: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every id asked for was replayed."""
        return not (self.not_parked or self.already_relayed or self.unknown)


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


def replay(db: Engine | Connection, tx_ids: Sequence[str] | None = None, *,
           all_parked: bool = False, now: datetime | None = None) -> ReplayResult:
    """Un-park ``tx_ids`` (or, with ``all_parked``, every parked row).

    With an engine it commits; with a connection the caller's transaction
    decides.
    """
    if (tx_ids is None) != all_parked:
        raise ValueError("replay: give tx_ids or all_parked=True, not both")
    now = now or datetime.now(UTC)
    if isinstance(db, Engine):
        with db.begin() as conn:
            return replay(conn, tx_ids, all_parked=all_parked, now=now)
    conn = db
    locking = conn.dialect.name == "postgresql"
    wanted = list(dict.fromkeys(tx_ids or ()))  # unique, in the order given
    found: dict[str, tuple[bool, bool, int, str | None]] = {}
    queries = ([select(t.c.tx_id, t.c.parked, t.c.relayed_at.is_not(None), t.c.attempts,
                       t.c.last_error).where(PARKED)] if all_parked else
               [select(t.c.tx_id, t.c.parked, t.c.relayed_at.is_not(None), t.c.attempts,
                       t.c.last_error).where(t.c.tx_id.in_(chunk))
                for chunk in _chunks(wanted)])
    for query in queries:
        if locking:
            query = query.with_for_update(of=t)
        for tx_id, parked, relayed, attempts, last_error in conn.execute(query):
            found[tx_id] = (bool(parked), bool(relayed), int(attempts), last_error)
    if all_parked:
        wanted = sorted(found)
    replayed = [tx for tx in wanted if tx in found and found[tx][0] and not found[tx][1]]
    for chunk in _chunks(replayed):
        conn.execute(update(t).where(t.c.tx_id.in_(chunk), PARKED).values(
            parked=False, attempts=0, next_attempt_at=now, claimed_by=None,
            claimed_until=None))
    for tx_id in replayed:
        _parked, _relayed, attempts, last_error = found[tx_id]
        log.info("replaying parked row %s after %d attempt(s); last error: %s", tx_id,
                 attempts, last_error, extra={"tx_id": tx_id, "attempts": attempts,
                                              "last_error": last_error})
    return ReplayResult(
        replayed=tuple(replayed),
        not_parked=tuple(tx for tx in wanted if tx in found and not found[tx][0]
                         and not found[tx][1]),
        already_relayed=tuple(tx for tx in wanted if tx in found and found[tx][1]),
        unknown=tuple(tx for tx in wanted if tx not in found),
    )
