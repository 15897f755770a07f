"""An inbox consumer process that dies (SIGKILL) after its first commit, before the ack.

``python inbox_child.py DB_URL BROKER TOPIC GROUP MARKER``: consumes TOPIC as
GROUP; the handler records the message in ``processed``. While MARKER does
not exist, the first commit creates it and kills the process, so the broker
never hears the ack and delivers the message again to the next member.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.orm import Session

from broker_lite.client import ReceivedMessage
from outbox.inbox import consumer


def main(db_url: str, broker: str, topic: str, group: str, marker: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    engine = create_engine(db_url)

    @consumer(topic, group, engine=engine, server=broker, consume_threads=1,
              rebalance_interval=0.5)
    def handle(session: Session, message: ReceivedMessage) -> None:
        session.execute(text("INSERT INTO processed (tx_id, body) VALUES (:k, :b)"),
                        {"k": message.dedupe_key, "b": message.body.decode()})
        if not Path(marker).exists():
            @event.listens_for(session, "after_commit")
            def crash(_session: Session) -> None:  # committed, not acked yet
                Path(marker).write_text(message.dedupe_key)
                os.kill(os.getpid(), signal.SIGKILL)

    handle.start()
    print("consuming", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(*sys.argv[1:6])
