"""A relay process that dies by SIGKILL between the stream's acks and marking its rows.

``python -m tests.targets.nats.relay_child DB_URL BROKER MARKER``: one real
``Relay.run_once`` over the outbox at DB_URL, publishing to BROKER
(``nats://...``) through the NATS target. Once every row of the pass is in
the stream (the acks are back), it writes the rows' ids to MARKER and
SIGKILLs itself: its rows stay claimed and unmarked.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import create_engine

from outbox import Outbox, Relay
from outbox.targets import OutgoingMessage
from outbox.targets.choose import publisher_for
from tests.support.publishers import AfterHalves
from tests.targets.nats.nats_support import fast_relay


def main(argv: list[str]) -> int:
    db, broker, marker = argv
    outbox = Outbox(engine=create_engine(db), broker=broker, relay=fast_relay(batch_size=1000))

    def die(messages: Sequence[OutgoingMessage]) -> None:
        Path(marker).write_text(",".join(m.tx_id for m in messages))
        os.kill(os.getpid(), signal.SIGKILL)

    Relay(outbox, AfterHalves(publisher_for(outbox), die)).run_once()
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
