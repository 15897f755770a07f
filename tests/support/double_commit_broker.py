"""``broker_lite serve`` with a test-only fault: every N-th commit record is written twice.

    python tests/support/double_commit_broker.py N serve --data-dir D ...

It models a broker that committed one transaction twice, which the consistency
audit must report as ``duplicate`` (tests/spark). The production broker has no
such switch: this process swaps in :class:`DoubleCommitTransactions` (a
``TransactionService`` subclass) where the core builds its transaction service,
then runs the ordinary ``broker_lite`` command line. Each doubled commit logs
``fault hook: commit of TX written twice`` at WARNING; clients still get the
first record's offsets. Use it through ``start_broker_lite(command=command(N))``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from broker_lite import cli
from broker_lite.core import broker as core_broker
from broker_lite.core.transactions import HalfEntry, TransactionService

__all__ = ["DoubleCommitTransactions", "command"]

log = logging.getLogger("broker_lite.core.transactions")


def command(every: int) -> list[str]:
    """The ``command`` prefix of ``start_broker_lite`` for a broker doubling every N-th commit."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return [sys.executable, str(Path(__file__).resolve()), str(every)]


class DoubleCommitTransactions(TransactionService):
    """Writes the commit record of every ``every``-th commit of this process twice."""

    every = 0
    _written = 0  # commit records this process wrote (not counting the doubles)

    def _write_commit(self, entry: HalfEntry, copy_offset: int) -> int:
        end_offset = super()._write_commit(entry, copy_offset)
        self._written += 1
        if self.every <= 0 or self._written % self.every:
            return end_offset
        first = (entry.commit_offset, entry.commit_queue_offset)
        end_offset = max(end_offset, super()._write_commit(entry, copy_offset))
        entry.commit_offset, entry.commit_queue_offset = first  # clients see the first
        log.warning("fault hook: commit of %s written twice", entry.transaction_id)
        return end_offset


def main(argv: list[str]) -> int:
    DoubleCommitTransactions.every = int(argv[0])
    core_broker.TransactionService = DoubleCommitTransactions  # type: ignore[misc]
    return cli.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
