"""The gRPC door's replay window (docs/security.md, "Replay on the gRPC door").

The ``MQv2-HMAC-SHA1`` signature of the official clients covers only
``x-mq-date-time``: a captured header pair authorizes any request as its account
while that date is within the ACL's ``clock_skew_seconds`` (300 s) of the broker's
clock, and not after. This pins the documented window: a header signed 290 s ago
still works for a request it was never sent with; one signed 310 s ago, or 310 s
ahead, is refused naming the skew.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from tests.support.attack import acl_broker, grpc_metadata, raw_grpc

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(120)]


def _signed_at(offset_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset_seconds)).strftime("%Y%m%dT%H%M%SZ")


def test_a_captured_grpc_header_works_only_within_the_clock_skew(tmp_path: Path) -> None:
    with acl_broker(tmp_path) as broker, raw_grpc(broker.grpc) as stub:
        def send(date_time: str, body: bytes) -> object:
            message = definition_pb2.Message(
                topic=definition_pb2.Resource(name="Orders"), body=body,
                system_properties=definition_pb2.SystemProperties(
                    message_id=f"R-{body.decode()}",
                    message_type=definition_pb2.MessageType.NORMAL))
            return stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]),
                                    metadata=grpc_metadata("app", date_time=date_time),
                                    timeout=30)

        inside = send(_signed_at(-290), b"replayed-290s-later")
        assert inside.status.code == Code.OK, inside  # the documented window is open
        for offset in (-310, 310):
            outside = send(_signed_at(offset), f"replayed-{offset}".encode())
            assert outside.status.code == Code.UNAUTHORIZED, (offset, outside)
            assert "away from the broker's clock (allowed: 300 s)" in outside.status.message
