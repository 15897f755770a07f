"""What a relay pass sends and what its ends came to (:mod:`outbox.relay`'s pass).

:func:`outgoing` is the half for a claimed row, :func:`recorded_half` the half a
row recorded in an earlier pass, :func:`waves` the ends split so a failed end
can hold back the rest of its message group, and :class:`Ended` each row's
outcome as the ends come back, whichever way they were sent (the two steps or
the one round trip, docs/outbox.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from outbox.claims import ClaimedRow
from outbox.targets.base import (
    EndOutcome,
    HalfStored,
    OutgoingMessage,
    TxEnd,
    TxEnded,
    TxState,
)

__all__ = ["STATES", "Ended", "outgoing", "recorded_half", "waves"]

log = logging.getLogger("rocketbox.relay")

#: a row's ``state`` as the end's :data:`~outbox.targets.base.TxState` (anything else:
#: ``UNKNOWN``), what :func:`~outbox.targets.base.tx_state` answers, without the call per row
STATES: dict[str | None, TxState] = {"COMMIT": "COMMIT", "ROLLBACK": "ROLLBACK"}


@dataclass(slots=True)
class Ended:
    """What a pass's ends came to, per ``tx_id``: the outcome (None: done with the row), the
    committed message's offset and position, and the groups that must wait."""

    outcomes: dict[str, Exception | None] = field(default_factory=dict)
    commit_offsets: dict[str, int] = field(default_factory=dict)
    positions: dict[str, str] = field(default_factory=dict)  # where the broker put a row
    failed_groups: set[str] = field(default_factory=set)

    def take(self, end: TxEnd, result: EndOutcome) -> bool:
        """Note ``end``'s ``result``; False when the row's group must wait (not ended)."""
        half = end.half
        tx_id = half.tx_id
        if isinstance(result, TxEnded):
            self.outcomes[tx_id] = None
            self.commit_offsets[tx_id] = result.commit_offset
            position = result.position or half.position
            if position is not None:
                self.positions[tx_id] = position
            return True
        if isinstance(result, Exception):
            self.outcomes[tx_id] = result
        elif half.message_id and end.state != "UNKNOWN":
            # RocketMQ forgot the transaction (a retried end, past its window):
            # its check-back commits the recorded half from the status table,
            # so the relay is done with the row; it is never sent a second half
            log.info("%s: %s; the check-back ends it", tx_id, result.reason,
                     extra={"tx_id": tx_id})
            self.outcomes[tx_id] = None
            return True
        else:  # left to check-back: held back, no attempt counted
            log.info("%s: %s", tx_id, result.reason, extra={"tx_id": tx_id})
        return False


def outgoing(row: ClaimedRow) -> OutgoingMessage:
    """The half to send for ``row``: its headers become the message's properties."""
    headers = row.headers
    return OutgoingMessage(row.tx_id, row.topic, row.body, row.tag,
                           tuple(row.keys.split()) if row.keys else (), row.message_group,
                           {str(k): str(v) for k, v in headers.items()} if headers else {})


def recorded_half(row: ClaimedRow) -> HalfStored:
    """The half a row recorded in an earlier pass (or none: offsets -1, ids "")."""
    return HalfStored(row.tx_id, row.topic,
                      -1 if row.half_offset is None else row.half_offset,
                      message_id=row.half_message_id or "",
                      transaction_id=row.half_transaction_id or "")


def waves(ends: list[TxEnd], group_of: dict[str, str | None]) -> list[list[TxEnd]]:
    """Split ends so each request holds at most one row per message group.

    Wave ``i`` has the ``i``-th row of every group (ungrouped rows all go in
    the first), so a failed end can hold back the rest of its group before any
    later row of that group is committed: per-group order survives a failure
    in the middle of a batch.
    """
    waves: list[list[TxEnd]] = []
    depth: dict[str, int] = {}
    for end in ends:
        group = group_of[end.tx_id]
        index = 0
        if group is not None:
            index = depth.get(group, 0)
            depth[group] = index + 1
        while len(waves) <= index:
            waves.append([])
        waves[index].append(end)
    return waves
