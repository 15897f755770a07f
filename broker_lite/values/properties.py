"""Message property names and their wire encoding (a leaf: store and client read them).

Properties travel as UTF-8 ``key\\x01value\\x02`` pairs, as in RocketMQ. The
names below are RocketMQ's, so records written here read the same way as its
documentation describes them.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker_lite.errors import InvalidMessageError

__all__ = [
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "CRC32_PROPERTY",
    "DELAY",
    "FROM_CHECK",
    "KEYS",
    "MAX_PROPERTIES_BYTES",
    "ORIGIN_MESSAGE_ID",
    "PGROUP",
    "REAL_QID",
    "REAL_TOPIC",
    "RECONSUME_TIME",
    "RETRY_TOPIC",
    "SHARDING_KEY",
    "TAGS",
    "TRANSACTION_CHECK_TIMES",
    "TRANSACTION_ID",
    "TRAN_MSG",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "TX_STATE",
    "UNIQ_KEY",
    "decode_properties",
    "encode_properties",
    "split_keys",
]

KEYS = "KEYS"
TAGS = "TAGS"
DELAY = "DELAY"
UNIQ_KEY = "UNIQ_KEY"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
TRANSACTION_ID = "__transactionId__"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
SHARDING_KEY = "__SHARDINGKEY"
CRC32_PROPERTY = "__CRC32#"
INNER_NUM = "INNER_NUM"
#: broker_lite's, on an op record (COMMIT or ROLLBACK) and a renewed half copy (CHECK)
TX_STATE = "TX_STATE"
#: on a resolution's op record when the producer answered a check-back
FROM_CHECK = "FROM_CHECK"

NAME_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Encode a property map; raise :class:`InvalidMessageError` on bad text.

    Hot path: the pairs are joined first and checked after, by counting
    separators (a key or value holding one makes the counts disagree).
    """
    if not properties:
        return b""
    try:  # key \x01 value, each pair ending with \x02: joined in C, no per-pair bytecode
        text = "\x02".join(map("\x01".join, properties.items())) + "\x02"
    except TypeError:
        bad = next(k for k, v in properties.items()
                   if not isinstance(k, str) or not isinstance(v, str))
        raise InvalidMessageError(f"property {bad!r} must map a str to a str",
                                  field="properties") from None
    n = len(properties)
    if text.count("\x01") != n or text.count("\x02") != n or "" in properties:
        bad = next(k for k, v in properties.items()
                   if not k or any(sep in k + v for sep in ("\x01", "\x02")))
        problem = "an empty property name" if not bad else (
            f"property {bad!r} contains a reserved separator byte (\\x01 or \\x02)")
        raise InvalidMessageError(problem, field="properties")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(f"not encodable as UTF-8: {exc}", field="properties") from exc
    if len(data) > MAX_PROPERTIES_BYTES:
        raise InvalidMessageError(
            f"{len(data)} bytes encoded, over the limit of {MAX_PROPERTIES_BYTES}",
            field="properties",
        )
    return data


def decode_properties(data: bytes) -> dict[str, str]:
    """Decode ``key\\x01value\\x02`` pairs; raise :class:`ValueError` on bad bytes."""
    if not data:
        return {}
    text = data.decode("utf-8")
    result: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        if not pair:
            continue
        key, sep, value = pair.partition(NAME_SEPARATOR)
        if not sep:
            raise ValueError(f"property pair without a separator: {pair[:40]!r}")
        result[key] = value
    return result


def split_keys(keys: str | None) -> list[str]:
    """RocketMQ keeps several user keys in one ``KEYS`` property, space separated."""
    if not keys:
        return []
    return [k for k in keys.split(" ") if k]
