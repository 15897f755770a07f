"""A relay that dies by SIGKILL between the broker's confirm and marking its rows.

``python relay_child.py DB_URL BROKER LEASE``: one relay pass over the due rows
(claimed for LEASE seconds),
through the RabbitMQ target; once the rows are published and confirmed
(``send_halves`` returned), the process kills itself with SIGKILL, before
the relay records anything.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from sqlalchemy import create_engine

from outbox import Outbox, Relay
from outbox.config import RelaySettings
from outbox.targets import OutgoingMessage
from outbox.targets.choose import publisher_for
from tests.support.publishers import AfterHalves


def _die(_sent: Sequence[OutgoingMessage]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(db_url: str, broker: str, lease: float) -> None:
    outbox = Outbox(engine=create_engine(db_url), broker=broker,
                    relay=RelaySettings(lease_seconds=lease))
    Relay(outbox, AfterHalves(publisher_for(outbox), _die)).run_once()
    sys.exit("the relay pass returned: the kill did not happen")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
