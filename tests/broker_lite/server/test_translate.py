"""The native door's edge carries every field, both ways, and so keeps the wire bytes.

Each body is filled with a value in every field (none left at its default),
translated, and compared field by field with the other side: a field added to
a protocol body or to the core's model without its translation fails here,
and a response body built from the core's value encodes as it did when the
core returned the body itself. A pull's answer is written from the core's
value without a copy, so there the core's value itself must encode to the
body's bytes, for every field set or left at its default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from broker_lite.core import model
from broker_lite.errors import ProtocolError
from broker_lite.protocol import encode
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


REQUESTS: list[tuple[type[Any], Callable[[Any], Any], dict[str, str], set[str]]] = [
    # (body, translation, body field -> core field where the names differ, fields the door keeps)
    (m.WireMessage, t.message_in, {}, set()),
    (m.EndTransactionRequest, t.end_in, {}, set()),
    (m.PullRequest, t.pull_in, {}, {"long_poll_ms"}),
    (m.AckRequest, t.ack_in, {}, set()),
    (m.SendBackRequest, t.send_back_in, {}, set()),
    (m.OffsetRequest, t.offset_query_in, {}, set()),
    (m.UpdateOffsetRequest, t.offset_update_in, {}, set()),
    (m.QueryAssignmentRequest, t.assignment_query_in, {}, set()),
    (m.HeartbeatRequest, t.registration_in, {"consumers": "subscriptions"}, set()),
    (m.TopicCreateRequest, t.new_topic_in, {}, set()),
    (m.QueryByKeyRequest, t.key_query_in, {}, set()),
]

ANSWERS: list[tuple[type[Any], Callable[[Any], Any]]] = [
    (model.SendResult, t.send_result_out),
    (model.EndResult, t.end_out),
    (model.DeliveredMessage, t.delivered_out),
    (model.CheckRequest, t.check_out),
    (model.Assignment, t.assignment_out),
    (model.TopicInfo, t.topic_info_out),
]


@pytest.mark.parametrize(("body", "translation", "renamed", "kept"), REQUESTS,
                         ids=[body.__name__ for body, *_ in REQUESTS])
def test_a_request_reaches_the_core_with_every_field(
        body: type[Any], translation: Callable[[Any], Any], renamed: dict[str, str],
        kept: set[str]) -> None:
    request = _filled(body)
    expected = {renamed.get(k, k): v for k, v in _fields(request).items() if k not in kept}
    assert _fields(translation(request)) == expected


@pytest.mark.parametrize(("value", "translation"), ANSWERS,
                         ids=[value.__name__ for value, _ in ANSWERS])
def test_an_answer_leaves_the_core_with_every_field(value: type[Any],
                                                    translation: Callable[[Any], Any]) -> None:
    answer = _filled(value)
    body = translation(answer)
    assert _fields(body) == _fields(answer)
    # the bytes are those of the body built from the same fields (as the core once did)
    assert encode(body) == encode(msgspec.convert(_fields(answer), type(body)))


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
