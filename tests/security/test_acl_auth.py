"""Authentication answers tell an attacker nothing: an unknown access key and a wrong
signature for a real one get the same answer, on both doors."""

from __future__ import annotations

from typing import Any

import pytest
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.protocol import RequestCode
from tests.broker_lite.grpc_door.grpc_support import raw_metadata, raw_stub
from tests.broker_lite.server.server_wire import WireClient, signed_hello


@pytest.mark.timeout(60)
def test_unknown_key_and_bad_signature_look_alike_on_the_native_door(tenants: Any) -> None:
    answers = []
    for key, secret in (("app", "not-app-secret"), ("nobody", "whatever")):
        with WireClient(tenants.server.native, hello=False) as intruder:
            error = intruder.error_of(RequestCode.HELLO, signed_hello("x", key, secret))
            answers.append((error.code, error.body.message))
    assert answers[0] == answers[1] and "nobody" not in answers[1][1]
    with tenants.wire("app") as app:  # the real key still works
        app.send("Orders", b"fine", group="rocketbox")


@pytest.mark.grpc
@pytest.mark.timeout(60)
def test_unknown_key_and_bad_signature_look_alike_on_the_grpc_door(tenants: Any) -> None:
    def route(key: str, secret: str) -> Any:
        with raw_stub(tenants.server.grpc) as stub:
            return stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="Orders")),
                                   metadata=raw_metadata("probe", key, secret), timeout=10)

    wrong, unknown = route("app", "not-app-secret"), route("nobody", "whatever")
    assert wrong.status.code == unknown.status.code == Code.UNAUTHORIZED
    assert wrong.status.message == unknown.status.message
    assert route("app", "app-secret").status.code == Code.OK
