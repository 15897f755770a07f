"""RocketMQ 5's commit log as its broker writes it, for tests; nothing from broker_lite.

Written from the Java source (apache/rocketmq ``MessageExtEncoder.encode``,
``CommitLog.DefaultAppendMessageCallback.doAppend``, ``MessageDecoder``,
``MessageVersion``, ``MessageSysFlag``, ``UtilAll.crc32``) field by field, so a
test can build segments RocketMQ's way and check broker_lite reads them, and
read broker_lite's segments with a decoder that shares no code with it.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

V1, V2, BLANK = -626843481, -626843477, -875286124  # MessageDecoder / CommitLog constants
CRC_KEY = "__CRC32#"
RESERVED = len(CRC_KEY) + 1 + 10 + 1  # CommitLog.CRC32_RESERVED_LEN
HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
PREPARED, COMMIT, ROLLBACK = 0x4, 0x8, 0xC


def crc31(data: bytes) -> int:
    """UtilAll.crc32: java.util.zip.CRC32's value & 0x7FFFFFFF."""
    return zlib.crc32(data) & 0x7FFFFFFF


def props_string(props: dict[str, str]) -> bytes:
    """MessageDecoder.messageProperties2String: name \\1 value \\2 for each pair."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode()


def host_bytes(host: str, port: int) -> bytes:
    return ipaddress.ip_address(host).packed + struct.pack(">i", port)


@dataclass
class Message:
    topic: str
    body: bytes
    props: dict[str, str] = field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    sysflag: int = 0
    born_ts: int = 1_700_000_000_000
    store_ts: int = 1_700_000_000_500
    born_host: tuple[str, int] = ("10.0.0.7", 50123)
    store_host: tuple[str, int] = ("10.0.0.1", 10911)
    reconsume: int = 0
    prepared_offset: int = 0


def encode(msg: Message, queue_offset: int, physical_offset: int, crc_prop: bool) -> bytes:
    """One record exactly as RocketMQ 5 appends it."""
    topic = msg.topic.encode()
    version = V2 if len(msg.topic) > 127 else V1  # autoMessageVersionOnTopicLen
    born = host_bytes(*msg.born_host)
    store = host_bytes(*msg.store_host)
    sysflag = msg.sysflag
    if len(born) == 20:
        sysflag |= 0x10  # BORNHOST_V6_FLAG
    if len(store) == 20:
        sysflag |= 0x20  # STOREHOSTADDRESS_V6_FLAG
    props = props_string(msg.props)
    append_sep = crc_prop and len(props) > 0 and props[-1] != 2
    props_len = len(props) + (1 if append_sep else 0) + (RESERVED if crc_prop else 0)
    tlen = 2 if version == V2 else 1
    total = (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + 8 + len(store) + 4 + 8
             + 4 + len(msg.body) + tlen + len(topic) + 2 + props_len)
    tx = sysflag & 0xC
    out = bytearray()
    out += struct.pack(">iiiii", total, version, crc31(msg.body), msg.queue_id, msg.flag)
    out += struct.pack(">qq", 0 if tx in (PREPARED, ROLLBACK) else queue_offset, physical_offset)
    out += struct.pack(">iq", sysflag, msg.born_ts) + born
    out += struct.pack(">q", msg.store_ts) + store
    out += struct.pack(">iqi", msg.reconsume, msg.prepared_offset, len(msg.body)) + msg.body
    out += (struct.pack(">h", len(topic)) if version == V2 else bytes([len(topic)])) + topic
    out += struct.pack(">h", props_len) + props + (b"\x02" if append_sep else b"")
    if crc_prop:
        crc = crc31(bytes(out))
        digits = ""
        for _ in range(10):  # MessageDecoder.createCrc32
            digits += chr(ord("0") + (crc % 10 if crc > 0 else 0))
            crc //= 10
        out += f"{CRC_KEY}\x01{digits}\x02".encode()
    assert len(out) == total
    return bytes(out)


@dataclass
class Placed:
    offset: int
    size: int
    queue_offset: int


class RocketLog:
    """A commit log appended the way RocketMQ's CommitLog does: segments, blanks, queues."""

    def __init__(self, directory: Path, segment_size: int, *, crc_prop: bool = False) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.crc_prop = crc_prop
        self.segments: list[bytearray] = [bytearray(segment_size)]
        self.position = 0
        self.queues: dict[tuple[str, int], int] = {}

    def put(self, msg: Message) -> Placed:
        tx = msg.sysflag & 0xC
        key = (msg.topic, msg.queue_id)
        queue_offset = self.queues.get(key, 0)
        probe = encode(msg, queue_offset, 0, self.crc_prop)
        if len(probe) + 8 > self.segment_size - self.position:  # END_FILE_MIN_BLANK_LENGTH
            seg = self.segments[-1]
            seg[self.position : self.position + 8] = struct.pack(
                ">ii", self.segment_size - self.position, BLANK)
            self.segments.append(bytearray(self.segment_size))
            self.position = 0
        offset = (len(self.segments) - 1) * self.segment_size + self.position
        data = encode(msg, queue_offset, offset, self.crc_prop)
        self.segments[-1][self.position : self.position + len(data)] = data
        self.position += len(data)
        if tx not in (PREPARED, ROLLBACK):
            self.queues[key] = queue_offset + 1
        return Placed(offset, len(data), queue_offset if tx not in (PREPARED, ROLLBACK) else 0)

    def write(self) -> list[Path]:
        """The segments as files named by their 20-digit start offsets."""
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, seg in enumerate(self.segments):
            path = self.directory / f"{i * self.segment_size:020d}"
            path.write_bytes(bytes(seg))
            paths.append(path)
        return paths


@dataclass
class Decoded:
    offset: int
    size: int
    magic: int
    sysflag: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    props: dict[str, str]
    prepared_offset: int
    store_ts: int
    crc_checked: bool


def decode_segment(data: bytes, start: int, *, need_crc_prop: bool) -> list[Decoded]:
    """MessageDecoder.decode plus CommitLog's checks, over one segment; asserts on bad bytes."""
    found: list[Decoded] = []
    pos = 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">ii", data, pos)
        if magic == BLANK:
            assert pos + total == len(data), "a blank record runs to the segment's end"
            break
        if total == 0 and magic == 0:
            break
        assert magic in (V1, V2), f"bad magic at {start + pos}"
        rec = data[pos : pos + total]
        body_crc, queue_id, _flag, queue_offset, phys, sysflag, _born = struct.unpack_from(
            ">iiiqqiq", rec, 8)
        assert phys == start + pos
        at = 48 + (20 if sysflag & 0x10 else 8)
        (store_ts,) = struct.unpack_from(">q", rec, at)
        at += 8 + (20 if sysflag & 0x20 else 8)
        _reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, at)
        at += 16
        body = rec[at : at + body_len]
        assert crc31(body) == body_crc, f"body CRC at {phys}"
        at += body_len
        if magic == V2:
            (topic_len,) = struct.unpack_from(">h", rec, at)
            at += 2
        else:
            topic_len = rec[at]
            at += 1
        topic = rec[at : at + topic_len].decode()
        at += topic_len
        (props_len,) = struct.unpack_from(">h", rec, at)
        at += 2
        text = rec[at : at + props_len].decode()
        assert at + props_len == total, f"lengths do not add up at {phys}"
        props = {}
        for pair in text.split("\x02"):  # string2messageProperties
            k, sep, v = pair.partition("\x01")
            if sep:
                props[k] = v
        crc_text = props.pop(CRC_KEY, None)
        if need_crc_prop:
            assert crc_text is not None, f"no {CRC_KEY} at {phys}"
        if crc_text is not None:
            expected = 0
            for ch in reversed(crc_text):  # CommitLog.checkMessageAndReturnSize
                expected = expected * 10 + ord(ch) - ord("0")
            assert crc31(rec[: total - RESERVED]) == expected, f"record CRC at {phys}"
        found.append(Decoded(phys, total, magic & 0xFFFFFFFF, sysflag, topic, queue_id,
                             queue_offset, body, props, prepared, store_ts,
                             crc_text is not None))
        pos += total
    return found


def decode_dir(directory: Path, *, need_crc_prop: bool) -> list[Decoded]:
    out: list[Decoded] = []
    for path in sorted(p for p in directory.iterdir() if p.name.isdigit()):
        out += decode_segment(path.read_bytes(), int(path.name), need_crc_prop=need_crc_prop)
    return out
