"""A relay process that stops for good between its halves and their ends.

``python relay_child.py DB_PATH BROKER MARKER``: one real ``Relay.run_once``
over the SQLite outbox at DB_PATH. Its halves reach the broker; then, instead
of ending them, it writes MARKER and blocks, so that the test can SIGKILL it
with its rows claimed and its halves unresolved.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import create_engine

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings
from outbox.targets import EndOutcome, HalfOutcome, OutgoingMessage, TxEnd


class StopBeforeEnd:
    """Sends the halves through the real publisher; never sends an end."""

    def __init__(self, inner: BrokerLitePublisher, marker: Path) -> None:
        self.inner = inner
        self.marker = marker

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        return self.inner.send_halves(messages)

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        self.marker.write_text(f"{len(ends)}\n")
        threading.Event().wait()  # until SIGKILL
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.inner.close()


def main(argv: list[str]) -> int:
    db, broker, marker = argv
    outbox = Outbox(engine=create_engine(f"sqlite:///{db}", connect_args={"timeout": 30}),
                    broker=broker, relay=RelaySettings(batch_size=1000))
    Relay(outbox, StopBeforeEnd(BrokerLitePublisher(outbox), Path(marker))).run_once()
    return 1  # not reached: the test kills this process in end()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
