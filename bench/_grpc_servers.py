"""bench/grpc_door.py's servers: the broker with both doors, and the do-nothing gRPC floor.

:func:`broker` runs ``broker-lite serve`` (native and gRPC doors on free
loopback ports) from the code measured; :func:`floor_server` runs a
``grpc.aio`` servicer that answers ``SendMessage`` at once and stores
nothing, in its own process: what gRPC in Python costs before the door does
anything.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import REPO_ROOT, SRC_ENV, add_repository_paths, auto_create_topics

add_repository_paths()

from procgroup import Process  # noqa: E402

__all__ = ["broker", "floor_server"]

_READY = re.compile(r"broker_lite ready native=(\S+) grpc=(\S+)")


@contextmanager
def broker(data_dir: Path) -> Iterator[tuple[str, str]]:
    """A ``broker-lite serve`` child on free loopback ports; yields (native, grpc)."""
    # ``-m`` puts the working directory first on the path: run where the code measured is
    source = Path(os.environ.get(SRC_ENV) or REPO_ROOT)
    argv = [sys.executable, "-m", "broker_lite", "serve", "--data-dir", str(data_dir),
            "--port", "0", "--grpc-port", "0", "--log-level", "warning",
            *auto_create_topics(source)]
    with Process(argv, log=data_dir.with_name(f"{data_dir.name}.log"), cwd=source,
                 name="broker-lite serve") as proc:
        match = proc.start().wait_for(_READY, 60)
        yield match[1], match[2]


_FLOOR_SERVER = """
import asyncio, grpc
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb, service_pb2_grpc

class Floor:
    async def SendMessage(self, request, context):
        dict(context.invocation_metadata())
        sp = request.messages[0].system_properties
        return spb.SendMessageResponse(status=pb.Status(code=pb.Code.OK, message="OK"),
            entries=[spb.SendResultEntry(status=pb.Status(code=pb.Code.OK, message="OK"),
                                         message_id=sp.message_id)])

async def main():
    server = grpc.aio.server()
    handler = service_pb2_grpc.MessagingServiceServicer()
    handler.SendMessage = Floor().SendMessage
    service_pb2_grpc.add_MessagingServiceServicer_to_server(handler, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


@contextmanager
def floor_server(log: Path) -> Iterator[str]:
    """A do-nothing ``grpc.aio`` servicer answering SendMessage at once: gRPC's own cost."""
    with Process([sys.executable, "-c", _FLOOR_SERVER], log=log, name="floor server") as proc:
        yield proc.start().wait_for(r"^(127\.0\.0\.1:\d+)\n", 60)[1]
