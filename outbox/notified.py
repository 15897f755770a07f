"""Rows named by a wake-up: the payload of ``NOTIFY rocketbox_relay``, and their read.

With ``CelerySettings.listen`` a committed row wakes the relays through
PostgreSQL (:mod:`outbox.celery.listen`). The notification names the row: a
row written with its own ``INSERT`` calls ``pg_notify(channel, payload)`` in
that statement, a row handed to the hook after the commit gets one ``NOTIFY``
per :data:`MAX_PAYLOAD` bytes of ids. The payload is a JSON array of
``tx_id`` s (:func:`wake_payloads`); an empty payload (a writer of an
earlier version) names no row and wakes a claiming pass.

The listener that leads (:mod:`outbox.celery.listen`) reads the named rows
with :func:`read_due`: one ``SELECT`` on its own connection, no claim, no
lock. A name is only a hint: a row is relayed when the status table says it
is due, whatever a payload says, so a forged ``NOTIFY`` (any role that can
connect may send one) relays nothing that was not committed and due. The
read and its record are in docs/outbox.md ("The notified rows, read without
a claim").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from outbox.claims import ClaimedRow
from outbox.models import transaction_table as t

if TYPE_CHECKING:
    import psycopg

__all__ = ["MAX_PAYLOAD", "DueRows", "parse_wake", "read_due", "wake_payload",
           "wake_payloads"]

#: PostgreSQL refuses a ``NOTIFY`` payload of 8,000 bytes or more; ids past this go in
#: the next notification
MAX_PAYLOAD = 7900

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(list[str]).decode


def wake_payload(tx_id: str) -> str:
    """The payload naming one row (the ``INSERT`` 's ``pg_notify``)."""
    return _encode([tx_id]).decode()


def wake_payloads(tx_ids: Sequence[str]) -> Iterator[str]:
    """Payloads naming ``tx_ids``, each under :data:`MAX_PAYLOAD` bytes (a ``tx_id`` is at
    most 64 characters, so every payload names at least one)."""
    part: list[str] = []
    size = 2
    for tx_id in tx_ids:
        cost = len(_encode(tx_id)) + 1
        if part and size + cost > MAX_PAYLOAD:
            yield _encode(part).decode()
            part, size = [], 2
        part.append(tx_id)
        size += cost
    if part:
        yield _encode(part).decode()


def parse_wake(payload: str) -> list[str] | None:
    """The ``tx_id`` s a payload names; None for a payload that names none (empty, from a
    writer of an earlier version, or not ours): such a wake-up claims as before."""
    if not payload.startswith("["):
        return None
    try:
        return _decode(payload)
    except msgspec.DecodeError:
        return None


#: the due rows among the named ones, with what decides whether they can go unclaimed
#: (the same due test as a claim: outbox.claims). The rows are found by their primary key
#: alone, in a subquery the due test cannot enter (``OFFSET 0``): where the statistics say
#: no row is pending, PostgreSQL otherwise walked a partial index of unrelayed rows, dead
#: entries and all (the read grew from 0.3 to 1.3 ms over 6,000 rows, bench/relay.py).
#: Never prepared: a generic plan drifted the same way (p50 at 500 commits/s rose from
#: 1.6 to 3.4 ms within a 12 s run)
_READ = (
    f"SELECT tx_id, seq, topic, tag, keys, message_group, body, headers, state, attempts, "
    f"half_offset, created_at, half_message_id, half_transaction_id "
    f"FROM (SELECT * FROM {t.name} WHERE tx_id = ANY(%s) OFFSET 0) AS named "
    f"WHERE relayed_at IS NULL AND NOT parked AND next_attempt_at <= now() "
    f"AND (claimed_until IS NULL OR claimed_until < now())"
)


class DueRows(msgspec.Struct, frozen=True):
    """What :func:`read_due` found: rows that can go without a claim, and whether some due
    row cannot (grouped, or with a half already: those go through a claim, in order)."""

    rows: list[ClaimedRow]
    need_claim: bool


def read_due(conn: psycopg.Connection[Any], tx_ids: Sequence[str], *,
             record: tuple[str, dict[str, Any]] | None = None) -> DueRows:
    """Read the due rows among ``tx_ids`` on ``conn`` (autocommit): one ``SELECT``. A
    ``record`` (the last pass's, :class:`~outbox.relay.ReadPass`) goes first, in the same
    pipeline: one round trip for both, each statement atomic by itself."""
    if record is None:
        found = conn.execute(_READ, (list(tx_ids),), prepare=False).fetchall()
    else:
        with conn.pipeline():
            conn.execute(record[0], record[1], prepare=False)
            cursor = conn.execute(_READ, (list(tx_ids),), prepare=False)
        found = cursor.fetchall()
    rows: list[ClaimedRow] = []
    need_claim = False
    for columns in found:
        row = ClaimedRow(*columns)
        if row.message_group is not None or row.half_offset is not None \
                or row.half_message_id is not None:
            need_claim = True
        else:
            rows.append(row)
    return DueRows(rows, need_claim)
