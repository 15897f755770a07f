"""The door's authentication and error codes as plain functions (no server)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from rocketmq.grpc_protocol import Code

from broker_lite.core.acl import Acl
from broker_lite.errors import (
    BrokerBusyError,
    InvalidMessageError,
    MessageTooLargeError,
    NoPermissionError,
    TopicNotFoundError,
    TransactionConflictError,
    UnauthorizedError,
)
from broker_lite.grpc_door.auth import Authenticator, metadata_dict, sign
from broker_lite.grpc_door.status import GrpcDoorError, code_for, status_for
from tests.broker_lite.grpc_door.grpc_support import raw_metadata

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(30)]

ACL = Acl.from_dict({"accounts": [{"access_key": "ak", "secret_key": "sk"}],
                     "clock_skew_seconds": 60})
STAMP = "20240501T101500Z"
AT = datetime(2024, 5, 1, 10, 15, 0)


def _headers(ak: str = "ak", sk: str = "sk", *, credential: str | None = None,
             date_time: str = STAMP, scheme: str = "MQv2-HMAC-SHA1") -> dict[str, str]:
    credential = ak if credential is None else credential
    return {"x-mq-client-id": "c1", "x-mq-date-time": date_time,
            "authorization": f"{scheme} Credential={credential}, "
                             f"SignedHeaders=x-mq-date-time, Signature={sign(sk, date_time)}"}


def test_the_official_clients_signature_is_accepted() -> None:
    caller = Authenticator(ACL).caller(metadata_dict(raw_metadata(ak="ak", sk="sk")),
                                       "ipv4:127.0.0.1:5000")
    assert caller.account is not None and caller.account.access_key == "ak"
    assert (caller.client_id, caller.peer, caller.language) == (
        "raw-test-client", "127.0.0.1:5000", "PYTHON")


def test_without_an_acl_only_the_client_id_is_needed() -> None:
    assert Authenticator(None).caller({"x-mq-client-id": "c"}, "").account is None
    with pytest.raises(GrpcDoorError) as info:
        Authenticator(None).caller({}, "")
    assert info.value.code == Code.CLIENT_ID_REQUIRED


@pytest.mark.parametrize(("headers", "why"), [
    (_headers(sk="wrong"), "signature does not match"),
    (_headers(ak="", sk=""), "credentials required"),
    (_headers(ak="who"), "signature does not match"),
    (_headers(scheme="HMAC-SHA256"), "unsupported authorization scheme"),
    ({"x-mq-client-id": "c1"}, "no 'authorization' metadata"),
    (_headers(date_time="yesterday"), "is not in the form"),
])
def test_refusals_say_why(headers: dict[str, str], why: str) -> None:
    with pytest.raises(UnauthorizedError, match=why):
        Authenticator(ACL).caller(headers, "", now=AT)


def test_credential_scope_after_a_slash_is_ignored() -> None:
    caller = Authenticator(ACL).caller(_headers(credential="ak/2024/region"), "", now=AT)
    assert caller.account is not None


def test_clock_skew_is_measured_against_the_brokers_clock() -> None:
    auth = Authenticator(ACL)  # the ACL file's 60 s
    auth.caller(_headers(), "", now=AT + timedelta(seconds=60))
    with pytest.raises(UnauthorizedError, match="61 s away"):
        auth.caller(_headers(), "", now=AT - timedelta(seconds=61))
    Authenticator(ACL, clock_skew_seconds=3600).caller(_headers(), "",
                                                       now=AT + timedelta(minutes=59))


def test_broker_errors_map_to_the_codes_the_client_knows() -> None:
    assert code_for(TopicNotFoundError("T")) == Code.TOPIC_NOT_FOUND
    assert code_for(NoPermissionError("perm")) == Code.FORBIDDEN
    assert code_for(UnauthorizedError("who")) == Code.UNAUTHORIZED
    assert code_for(MessageTooLargeError(size=2, limit=1)) == Code.MESSAGE_BODY_TOO_LARGE
    assert code_for(InvalidMessageError("x", field="topic")) == Code.ILLEGAL_TOPIC
    assert code_for(InvalidMessageError("x", field="keys")) == Code.ILLEGAL_MESSAGE_KEY
    assert code_for(TransactionConflictError("t", "committed", "rollback")) == Code.BAD_REQUEST
    assert code_for(BrokerBusyError("busy")) == Code.TOO_MANY_REQUESTS
    unexpected = status_for(ZeroDivisionError("boom"))
    assert unexpected.code == Code.INTERNAL_SERVER_ERROR and "boom" in unexpected.message


def test_the_package_exports_its_public_names() -> None:
    import broker_lite.grpc_door as door

    assert sorted(door.__all__) == ["GrpcDoor", "GrpcDoorConfig", "GrpcDoorError",
                                    "MessagingService", "add_to_server"]
    assert all(hasattr(door, name) for name in door.__all__)
