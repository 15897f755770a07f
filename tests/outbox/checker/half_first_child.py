"""A process that dies (SIGKILL) inside a half-first local transaction.

``python half_first_child.py DB_URL BROKER TX_ID``: sends the half for TX_ID
with its PostgreSQL xid, writes a business row, prints ``half sent``, and is
killed before committing, so PostgreSQL aborts the transaction.
"""

from __future__ import annotations

import os
import signal
import sys

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from broker_lite.client import Message, TransactionProducer
from outbox import Outbox
from outbox.half_first import SqlStatusListener, send_in_transaction


def main(db_url: str, broker: str, tx_id: str) -> None:
    outbox = Outbox(engine=create_engine(db_url), broker=broker)
    producer = TransactionProducer(outbox.producer_group, SqlStatusListener(outbox), broker)
    producer.start()

    def work(session: Session) -> None:
        session.execute(text("INSERT INTO orders (id) VALUES (:id)"), {"id": tx_id})
        print("half sent", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    send_in_transaction(outbox, producer, Message("HalfFirst", b"{}", msg_id=tx_id), work)


if __name__ == "__main__":
    main(*sys.argv[1:4])
