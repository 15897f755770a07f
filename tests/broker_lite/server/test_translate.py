"""The native door hands the core what it decoded and writes what it answered, byte for byte.

The native bodies that carry the core's values *are* those values (one
definition, :mod:`broker_lite.values.messages`), so nothing is copied at the
door. What must not change is the wire: every body of
:mod:`broker_lite.protocol.messages`, filled with a value in every field (and
again with only its required fields), encodes to the bytes it encoded to when
the protocol defined its own structs (their digests, taken at the commit
before the fold, are pinned below). A pull's answer is written from the core's
value without a copy and cut to a frame; the heartbeat is the one body
translated (its ``consumers`` are the core's ``subscriptions``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from broker_lite.core import model
from broker_lite.errors import ProtocolError
from broker_lite.protocol import REQUEST_TYPES, RESPONSE_TYPES, BodyError, decode, encode
from broker_lite.protocol import messages as m
from broker_lite.server import translate as t
from broker_lite.server.fit import RESPONSE_OVERHEAD, pull_body

pytestmark = pytest.mark.timeout(30)


def _value(info: mi.Type, name: str) -> Any:
    """A value of type ``info`` that is no field's default."""
    if isinstance(info, mi.StructType):
        return info.cls(**{f.name: _value(f.type, f.name) for f in info.fields})
    if isinstance(info, mi.UnionType):  # X | None
        return _value(next(i for i in info.types if not isinstance(i, mi.NoneType)), name)
    if isinstance(info, mi.BoolType):
        return True
    if isinstance(info, mi.IntType):
        return 1000 + len(name)
    if isinstance(info, mi.StrType):
        return f"{name}-value"
    if isinstance(info, mi.BytesType):
        return name.encode()
    if isinstance(info, mi.ListType):
        return [_value(info.item_type, name), _value(info.item_type, name + "2")]
    if isinstance(info, mi.DictType):
        return {f"{name}-key": _value(info.value_type, name)}
    raise AssertionError(f"no sample for {info!r} ({name})")


def _filled(cls: type[Any]) -> Any:
    return _value(mi.type_info(cls), cls.__name__)


def _fields(value: Any) -> Any:
    return msgspec.to_builtins(value, builtin_types=(bytes,))


#: sha256 (first 16 hex digits) of each body encoded filled, and with only its required
#: fields, as the protocol's own structs encoded them before the core's values took their place
WIRE_DIGESTS: dict[str, tuple[str, str]] = {
    "AckRequest": ("5a77ee5561ea2984", "5a77ee5561ea2984"),
    "Assignment": ("07fe3ebec4e4674f", "b61350ae456543a5"),
    "CheckTransactionRequest": ("a352500c8f784a62", "92f63dd08de979a9"),
    "CheckTransactionResponse": ("e416ff3338fc39c5", "e416ff3338fc39c5"),
    "ConsumerSubscription": ("05d2442915635e56", "4954f06755abe1d7"),
    "DeliveredMessage": ("bac60795d3917845", "091af4228fc7dbeb"),
    "Empty": ("76be8b528d0075f7", "76be8b528d0075f7"),
    "EndTransactionBatchRequest": ("623cfe86898067e3", "623cfe86898067e3"),
    "EndTransactionBatchResponse": ("9be4385c6491783c", "9be4385c6491783c"),
    "EndTransactionRequest": ("2bd5461779c002b4", "12e96a5b787c6119"),
    "EndTransactionResponse": ("6031b42d113162e7", "5ab87258bb9d5c9c"),
    "ErrorBody": ("dd3782e878df9991", "a56ff509139cbf01"),
    "HeartbeatRequest": ("1d367158dd7d2222", "0a08d80d9b48c26f"),
    "HelloRequest": ("88511c9d828ebc04", "0a08d80d9b48c26f"),
    "HelloResponse": ("9fccf1c5fe877a94", "9fccf1c5fe877a94"),
    "OffsetRequest": ("f0426a483a7a0d36", "f0426a483a7a0d36"),
    "OffsetResponse": ("9bf887560e943a6f", "9bf887560e943a6f"),
    "PullRequest": ("2c5c97a54c3d31fa", "9968b5104aee6390"),
    "PullResponse": ("5454925160c1cf13", "5454925160c1cf13"),
    "QueryAssignmentRequest": ("0ae84ccf199aa164", "0ae84ccf199aa164"),
    "QueryByKeyRequest": ("f35422296d67136a", "2dceada88b4291e0"),
    "QueryByKeyResponse": ("2bd69ab58cadac6c", "2bd69ab58cadac6c"),
    "SendBackRequest": ("48b158c8032277d8", "5a77ee5561ea2984"),
    "SendBatchRequest": ("2f502d1032339277", "2f502d1032339277"),
    "SendBatchResponse": ("6e21a6ebe8fb584f", "6e21a6ebe8fb584f"),
    "SendItemResult": ("85ccf55055835540", "d0650c8fde575a26"),
    "SendRequest": ("f10868eb0950d675", "f10868eb0950d675"),
    "SendResult": ("43f196a9de843466", "312cf6911f2f6c03"),
    "TopicCreateRequest": ("2e05b4b613c1d02f", "02ec118fa64c8790"),
    "TopicInfo": ("f795686190e59b68", "fb1417536e3a3b60"),
    "TopicListResponse": ("3f417929b5420a45", "3f417929b5420a45"),
    "TopicRouteRequest": ("02ec118fa64c8790", "02ec118fa64c8790"),
    "UpdateOffsetRequest": ("9968b5104aee6390", "9968b5104aee6390"),
    "WireMessage": ("b7bc3d69ff43bd40", "ba34a03873089024"),
}

#: the wire name of each core value the native door decodes into, or writes, as it is
SAME_STRUCT: list[tuple[Any, type[Any]]] = [
    (m.WireMessage, model.Message), (m.SendResult, model.SendResult),
    (m.EndTransactionRequest, model.EndRequest), (m.EndTransactionResponse, model.EndResult),
    (m.CheckTransactionRequest, model.CheckRequest),
    (m.DeliveredMessage, model.DeliveredMessage), (m.PullResponse, model.PullResult),
    (m.QueryAssignmentRequest, model.AssignmentQuery), (m.Assignment, model.Assignment),
    (m.OffsetRequest, model.OffsetQuery), (m.UpdateOffsetRequest, model.OffsetUpdate),
    (m.AckRequest, model.Ack), (m.SendBackRequest, model.SendBack),
    (m.ConsumerSubscription, model.Subscription), (m.TopicCreateRequest, model.NewTopic),
    (m.TopicInfo, model.TopicInfo), (m.QueryByKeyRequest, model.KeyQuery),
]


def _digest(value: Any) -> str:
    return hashlib.sha256(encode(value)).hexdigest()[:16]


def _bodies() -> list[str]:
    return sorted(name for name in m.__all__ if name not in {"Body", "TxState"})


def test_every_body_of_every_code_is_pinned() -> None:
    used = {cls for cls in (*REQUEST_TYPES.values(), *RESPONSE_TYPES.values())
            if cls.__module__ in {m.__name__, model.Message.__module__}}
    named = {getattr(m, name) for name in WIRE_DIGESTS}
    assert used <= named
    assert set(_bodies()) == set(WIRE_DIGESTS)


@pytest.mark.parametrize("name", sorted(WIRE_DIGESTS))
def test_a_body_encodes_to_the_bytes_it_always_did(name: str) -> None:
    body = getattr(m, name)
    filled, minimal = _filled(body), _minimal(body)
    assert (_digest(filled), _digest(minimal)) == WIRE_DIGESTS[name]
    assert decode(encode(filled), body) == filled
    assert decode(encode(minimal), body) == minimal


@pytest.mark.parametrize(("wire", "value"), SAME_STRUCT,
                         ids=[value.__name__ for _, value in SAME_STRUCT])
def test_the_door_decodes_straight_into_the_core_value(wire: Any, value: type[Any]) -> None:
    assert wire is value
    request = _filled(value)
    assert type(decode(encode(request), wire)) is value


@pytest.mark.parametrize("name", ["EndTransactionRequest", "AckRequest", "WireMessage"])
def test_a_malformed_body_is_named_by_its_wire_name(name: str) -> None:
    with pytest.raises(BodyError, match=f"^malformed {name}: ") as caught:
        decode(encode({}), getattr(m, name))
    assert caught.value.body_type == name


def test_a_pull_request_is_the_core_query_plus_the_door_wait() -> None:
    request = _filled(m.PullRequest)
    assert isinstance(request, model.PullQuery)
    core_fields = {f.name for f in msgspec.structs.fields(model.PullQuery)}
    assert {f.name for f in msgspec.structs.fields(m.PullRequest)} - core_fields == {
        "long_poll_ms"}


def test_a_heartbeat_reaches_the_core_with_every_field() -> None:
    request = _filled(m.HeartbeatRequest)
    registration = t.registration_in(request)
    expected = _fields(request)
    expected["subscriptions"] = expected.pop("consumers")
    assert _fields(registration) == expected


def _minimal(cls: type[Any]) -> Any:
    """``cls`` with its required fields filled and every other left at its default."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return cls(**{f.name: _value(f.type, f.name) for f in info.fields if f.required})


def _reference(result: model.PullResult) -> m.PullResponse:
    """The body the door built field for field before it wrote the core's value."""
    return msgspec.convert(_fields(result), m.PullResponse)


def _pull_results() -> list[model.PullResult]:
    filled = _filled(model.PullResult)
    bare = model.PullResult(status="found", messages=[_minimal(model.DeliveredMessage)],
                            next_offset=1, min_offset=0, max_offset=1)
    info = mi.type_info(model.DeliveredMessage)
    assert isinstance(info, mi.StructType)
    one_each = [msgspec.structs.replace(_minimal(model.DeliveredMessage),
                                        **{f.name: _value(f.type, f.name)})
                for f in info.fields if not f.required]
    each = model.PullResult(status="found", messages=one_each, next_offset=9, min_offset=0,
                            max_offset=9)
    empty = model.PullResult(status="no_new_message", messages=[], next_offset=3,
                             min_offset=0, max_offset=3)
    return [filled, bare, each, empty]


@pytest.mark.parametrize("result", _pull_results(), ids=["filled", "bare", "each", "empty"])
def test_a_pull_answer_is_the_core_value_encoded_as_the_wire_body(
        result: model.PullResult) -> None:
    written = pull_body(result, 1 << 20, "orders")
    assert bytes(written) == encode(_reference(result))
    decoded = msgspec.msgpack.decode(bytes(written), type=m.PullResponse)
    assert _fields(decoded) == _fields(result)


def _messages(count: int, size: int) -> model.PullResult:
    messages = [model.DeliveredMessage(msg_id=f"id-{i}", topic="orders", queue_id=0,
                                       queue_offset=10 + i, commit_log_offset=i * size,
                                       body=bytes(size)) for i in range(count)]
    return model.PullResult(status="found", messages=messages, next_offset=10 + count,
                            min_offset=0, max_offset=10 + count)


def test_a_pull_answer_larger_than_a_frame_is_cut_and_the_next_pull_starts_after_it() -> None:
    result = _messages(8, 1000)
    limit = RESPONSE_OVERHEAD + 3 * len(encode(result.messages[0])) + 10
    decoded = msgspec.msgpack.decode(bytes(pull_body(result, limit, "orders")),
                                     type=m.PullResponse)
    assert [msg.queue_offset for msg in decoded.messages] == [10, 11, 12]
    assert decoded.next_offset == 13
    assert (decoded.min_offset, decoded.max_offset) == (0, 18)


def test_a_message_larger_than_a_frame_names_its_offset_topic_and_the_limit() -> None:
    with pytest.raises(ProtocolError, match=r"offset 10 of 'orders'.* 2000 bytes"):
        pull_body(_messages(2, 4000), 2000, "orders")
