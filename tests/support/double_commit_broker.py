"""``broker_lite serve`` with a test-only fault: every N-th commit record is written twice.

    python tests/support/double_commit_broker.py N serve --data-dir D ...

It models a broker that committed one transaction twice, which the consistency
audit must report as ``duplicate`` (tests/spark). The production broker has no
such switch: this process runs the ordinary ``broker-lite serve`` command line
with a core built around :class:`DoubleCommitTransactions`, a
``TransactionService`` whose public hook
:meth:`~broker_lite.core.transaction_ends.TransactionEnds.after_commit` (called
after each commit record an end writes, alone or in a batch round) writes the
commit record again, passed by construction (``Broker(config, transactions=...)``,
``serve.run(args, open_broker=...)``). Each doubled commit logs ``fault hook:
commit of TX written twice`` at WARNING; clients still get the first record's
offsets. Use it through ``start_broker_lite(command=command(N))``.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Any

from broker_lite import cli
from broker_lite.cli import serve
from broker_lite.core import Broker, BrokerConfig
from broker_lite.core.transaction_records import write_commit
from broker_lite.core.transactions import HalfEntry, TransactionService
from broker_lite.storage import MessageStore

__all__ = ["DoubleCommitTransactions", "command"]

log = logging.getLogger("broker_lite.core.transactions")


def command(every: int) -> list[str]:
    """The ``command`` prefix of ``start_broker_lite`` for a broker doubling every N-th commit."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    return [sys.executable, str(Path(__file__).resolve()), str(every)]


class DoubleCommitTransactions(TransactionService):
    """Writes the commit record of every ``every``-th commit of this process twice."""

    def __init__(self, store: MessageStore, *args: Any, every: int) -> None:
        super().__init__(store, *args)
        self.every = every
        self._doubling_store = store
        self._written = 0  # commit records this broker wrote (not counting the doubles)

    def after_commit(self, entry: HalfEntry, copy_offset: int) -> int:
        """Count one commit written; the ``every``-th is written once more (clients still
        see the first); the end offset of what was written here (0: nothing)."""
        self._written += 1
        if self.every <= 0 or self._written % self.every:
            return 0
        end_offset = write_commit(self._doubling_store, entry, copy_offset).end_offset
        log.warning("fault hook: commit of %s written twice", entry.transaction_id)
        return end_offset


def main(argv: list[str]) -> int:
    every = int(argv[0])

    def open_broker(config: BrokerConfig) -> Broker:
        """The core ``broker-lite serve`` opens, with the doubling transaction service."""
        return Broker(config, transactions=functools.partial(DoubleCommitTransactions,
                                                             every=every))

    args = cli.build_parser().parse_args(argv[1:])
    if args.handler is not serve.run:
        raise SystemExit(f"double_commit_broker: only 'serve', not {argv[1:2]}")
    code: int = serve.run(args, open_broker=open_broker)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
