"""``broker_lite serve`` with a test-only fault: the gRPC door answers a client's end OK, drops it.

    python tests/outbox/targets/lost_end_broker.py serve --data-dir D --grpc-proxy-semantics ...

RocketMQ's proxy answers EndTransaction OK once it has written a one-way
request to the broker; if that request never arrives (the broker restarted,
the connection broke), the client never hears of it and the half stays open
until a check-back ends it. In proxy mode this process answers every end a
client sent (not one answering a check-back) OK and never applies it, logging
``fault hook: end of TX answered OK and dropped`` at WARNING. The production
broker has no such switch. Use it through ``start_broker_lite(command=command())``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from broker_lite import cli
from broker_lite.core.model import EndRequest
from broker_lite.grpc_door.proxy_mode import ProxyMode

__all__ = ["command"]

log = logging.getLogger("broker_lite.grpc")


def command() -> list[str]:
    """The ``command`` prefix of ``start_broker_lite`` for a door dropping clients' ends."""
    return [sys.executable, str(Path(__file__).resolve())]


def main(argv: list[str]) -> int:
    hand_off = ProxyMode.hand_off

    def drop_clients_ends(self: ProxyMode, loop: Any, request: EndRequest) -> None:
        if request.from_check:
            hand_off(self, loop, request)
            return
        log.warning("fault hook: end of %s answered OK and dropped", request.transaction_id)

    ProxyMode.hand_off = drop_clients_ends  # type: ignore[method-assign]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
