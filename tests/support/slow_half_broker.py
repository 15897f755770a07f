"""``broker_lite serve`` with a test-only fault: the answer to every N-th half is held back.

    python tests/support/slow_half_broker.py N S serve --data-dir D --grpc-proxy-semantics ...

After the door has stored the N-th, 2N-th ... half (message type TRANSACTION)
it waits S seconds before answering the SendMessage that carried it. A client
whose request timeout is shorter gives up and re-sends the half with the same
message id; in proxy mode the door stores it again, as RocketMQ's proxy does
when it answers too late (tests/broker_lite/grpc_door). The production broker
has no such switch: this process wraps the gRPC door's SendMessage handler,
then runs the ordinary ``broker_lite`` command line. Each held answer logs
``fault hook: the answer for a half is held S s`` at WARNING. Use it through
``start_broker_lite(command=command(N, S))``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_lite import cli
from broker_lite.grpc_door import send as grpc_send

__all__ = ["command"]

log = logging.getLogger("broker_lite.grpc_door")


def command(every: int, seconds: float) -> list[str]:
    """The ``command`` prefix of ``start_broker_lite`` for a door holding every N-th half."""
    if every < 1 or seconds <= 0:
        raise ValueError(f"every must be >= 1 and seconds > 0, got {every} and {seconds}")
    return [sys.executable, str(Path(__file__).resolve()), str(every), str(seconds)]


def main(argv: list[str]) -> int:
    every, seconds = int(argv[0]), float(argv[1])
    answer = grpc_send.send_message
    stored = 0  # halves the door has stored (every answer the wrapped handler gave OK)

    async def slow_send(door: Any, caller: Any, request: Any) -> Any:
        nonlocal stored
        response = await answer(door, caller, request)
        before = stored
        stored += sum(1 for m, entry in zip(request.messages, response.entries, strict=False)
                      if m.system_properties.message_type == pb.MessageType.TRANSACTION
                      and entry.status.code == pb.Code.OK)
        if stored // every > before // every:
            log.warning("fault hook: the answer for a half is held %g s", seconds)
            await asyncio.sleep(seconds)
        return response

    grpc_send.send_message = slow_send  # service.py looks it up on each request
    return cli.main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
