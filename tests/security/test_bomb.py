"""Decompression bombs (issue 27, item 4): no body is inflated past max_message_size.

A 1 MB GZIP body that expands to 1 GiB is sent through the gRPC door (raw grpc,
with ``body_encoding = GZIP``, as the official client marks a compressed body)
by read-only ``bob`` and by ``app``, who may publish; the same bytes go through
the native door, which has no compression flag and stores a body as sent. Each
is refused (or, for ``app`` on the native door, stored as the 1 MB it is). The
broker's resident memory, read from ``/proc``, grows by under 100 MB, and a
native client sending all along never waits over 1 s for an answer.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import zstandard
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2

from broker_lite.client import Message, Producer
from broker_lite.errors import NoPermissionError
from tests.support import broker_records, wait_until
from tests.support import rocketmq_log as rmq
from tests.support.attack import (
    SECRETS,
    acl_broker,
    grpc_metadata,
    peak_rss_bytes,
    raw_grpc,
    rss_bytes,
)

pytestmark = pytest.mark.grpc

LIMIT = 4 * 1024 * 1024  # the broker's default max_message_size
GIB = 1 << 30
MB = 1_000_000


def _gzip_of_zeros(size: int) -> bytes:
    """GZIP of ``size`` zero bytes, made in 1 MiB steps (never ``size`` bytes in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    step = b"\0" * (1 << 20)
    parts = [packer.compress(step) for _ in range(size // len(step))]
    parts.append(packer.flush())
    return b"".join(parts)


BOMB = _gzip_of_zeros(GIB)


def _gzip_message(topic: str, body: bytes, message_id: str) -> definition_pb2.Message:
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic), body=body,
        system_properties=definition_pb2.SystemProperties(
            message_id=message_id, body_encoding=definition_pb2.Encoding.GZIP,
            message_type=definition_pb2.MessageType.NORMAL))


class _Sampler(threading.Thread):
    """Samples the broker's RSS every few ms; ``peak`` is the largest seen."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_bytes(pid)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss_bytes(self.pid))


class _NativeSender(threading.Thread):
    """``app`` sending small messages through the native door; every call's duration kept."""

    def __init__(self, native: str) -> None:
        super().__init__(daemon=True)
        self.native = native
        self.durations: list[float] = []
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Producer("latency", self.native, access_key="app",
                          secret_key=SECRETS["app"]) as producer:
                while not self.done.is_set():
                    started = time.monotonic()
                    producer.send(Message("Orders", b"tick"), timeout=30)
                    self.durations.append(time.monotonic() - started)
        except BaseException as exc:
            self.error = exc


@pytest.mark.timeout(240)
def test_a_gzip_bomb_is_refused_on_both_doors_without_memory_or_stalls(tmp_path: Path) -> None:
    assert len(BOMB) < 1_100_000  # a 1 MB body ...
    with acl_broker(tmp_path) as broker:
        pid = broker.process.pid
        sender = _NativeSender(broker.native)
        sender.start()
        wait_until(lambda: len(sender.durations) >= 20 or sender.error, timeout=60,
                   message="the native sender made no calls")
        assert sender.error is None, sender.error
        baseline, hwm_before = rss_bytes(pid), peak_rss_bytes(pid)
        sampler = _Sampler(pid)
        sampler.start()
        answers = {}
        try:
            with raw_grpc(broker.grpc) as stub:
                for account, topic in (("bob", "A"), ("app", "Orders"), ("root", "Orders")):
                    for attempt in range(2):
                        request = service_pb2.SendMessageRequest(
                            messages=[_gzip_message(topic, BOMB, f"BOMB-{account}-{attempt}")])
                        answers[account] = stub.SendMessage(
                            request, metadata=grpc_metadata(account), timeout=60)
                # a batch of bodies each under the limit, together over what one request
                # may carry (max_message_size plus 1 MiB)
                quarter = _gzip_of_zeros(LIMIT // 2)
                batch = service_pb2.SendMessageRequest(messages=[
                    _gzip_message("Orders", quarter, f"HALF-{i}") for i in range(3)])
                answers["batch"] = stub.SendMessage(batch, metadata=grpc_metadata("app"),
                                                    timeout=60)
            # the native door has no compression flag: read-only bob is refused, and app's
            # bytes are stored as the 1 MB they are, never inflated
            with pytest.raises(NoPermissionError), \
                    Producer("bombers", broker.native, access_key="bob",
                             secret_key=SECRETS["bob"]) as bob:
                bob.send(Message("A", BOMB))
            with Producer("bombers", broker.native, access_key="app",
                          secret_key=SECRETS["app"]) as app:
                stored = app.send(Message("Orders", BOMB, msg_id="NATIVE-BOMB"))
            calls_before = len(sender.durations)
            wait_until(lambda: len(sender.durations) >= calls_before + 20 or sender.error,
                       timeout=60, message="the native sender stopped answering")
        finally:
            sender.done.set()
            sampler.done.set()
            sender.join(60)
            sampler.join(10)
        hwm_after = peak_rss_bytes(pid)
        growth = max(sampler.peak, hwm_after if hwm_after > hwm_before else 0) - baseline
        slowest = max(sender.durations)
        print(f"\nbomb: {len(BOMB)} bytes gzip -> {GIB} bytes; broker RSS {baseline / MB:.1f} MB "
              f"before, growth {growth / MB:.1f} MB; native sender {len(sender.durations)} "
              f"calls, slowest {slowest * 1000:.0f} ms")
        for account in ("bob", "app", "root"):
            answer = answers[account]
            assert answer.status.code != Code.OK, (account, answer)
            assert all(e.status.code != Code.OK for e in answer.entries), (account, answer)
        for account in ("app", "root"):  # allowed to publish: refused for the size alone
            answer = answers[account]
            entry_status = answer.entries[0].status if answer.entries else answer.status
            assert entry_status.code == Code.MESSAGE_BODY_TOO_LARGE, entry_status
            assert f"limit of {LIMIT} bytes (max_message_size)" in entry_status.message
        batch_codes = [e.status.code for e in answers["batch"].entries]
        assert Code.MESSAGE_BODY_TOO_LARGE in batch_codes or \
            answers["batch"].status.code == Code.MESSAGE_BODY_TOO_LARGE, answers["batch"]
        assert sender.error is None, sender.error
        assert growth < 100 * MB, f"broker RSS grew by {growth / MB:.1f} MB"
        assert slowest < 1.0, f"a native call waited {slowest:.2f} s"
    records = broker_records(broker.data_dir)
    bodies = {r["properties"].get("UNIQ_KEY"): r for r in records}
    assert not any(str(key).startswith(("BOMB-", "HALF-")) for key in bodies)
    native = bodies[stored.msg_id]
    assert native["body_length"] == len(BOMB)
    assert native["body_sha256"] == hashlib.sha256(BOMB).hexdigest()



def _zeros_compressed(kind: str, size: int) -> bytes:
    """``size`` zero bytes compressed with ``kind``, in 1 MiB steps."""
    step = b"\0" * (1 << 20)
    if kind == "zlib":
        packer: Any = zlib.compressobj(9)
        parts = [packer.compress(step) for _ in range(size // len(step))]
        return b"".join([*parts, packer.flush()])
    if kind == "lz4":
        lz4_packer = lz4.frame.LZ4FrameCompressor()
        head = lz4_packer.begin()
        parts = [lz4_packer.compress(step) for _ in range(size // len(step))]
        return b"".join([head, *parts, lz4_packer.flush()])
    zstd_packer = zstandard.ZstdCompressor().compressobj()
    parts = [zstd_packer.compress(step) for _ in range(size // len(step))]
    return b"".join([*parts, zstd_packer.flush()])


def _inspect_rss(folder: Path) -> tuple[str, int]:
    """``broker-lite inspect --commitlog FOLDER --verify``: (stderr, its peak RSS in bytes)."""
    script = ("import resource, runpy, sys\n"
              "sys.argv = ['broker_lite', 'inspect', '--commitlog', sys.argv[1], '--verify']\n"
              "try:\n    runpy.run_module('broker_lite', run_name='__main__')\n"
              "except SystemExit:\n    pass\n"
              "print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
              " file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, str(folder)],
                          capture_output=True, text=True, timeout=100)
    head, _, tail = done.stderr.rpartition("maxrss_kib")
    return head, int(tail.split()[0]) * 1024


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("kind", "size", "sysflag"), [
    ("zlib", GIB, 0x301), ("lz4", 256 << 20, 0x101), ("zstd", GIB, 0x201)])
def test_the_store_reader_never_inflates_a_stored_body_past_the_limit(
        tmp_path: Path, kind: str, size: int, sysflag: int) -> None:
    """A compressed record of a RocketMQ commit log (migrated data) claiming ``size`` bytes:
    ``broker-lite inspect`` names it unreadable with the limit, and its memory grows by
    under 100 MB over the same command on a plain log."""
    plain = rmq.RocketLog(tmp_path / "plain", 8 << 20)
    plain.put(rmq.Message("Plain", zlib.compress(b"ok " * 100), {}, sysflag=0x301))
    plain.write()
    baseline_err, baseline = _inspect_rss(tmp_path / "plain")
    assert "ok: 1 records" in baseline_err, baseline_err
    log = rmq.RocketLog(tmp_path / "bomb", 8 << 20)
    placed = log.put(rmq.Message("Bomb", _zeros_compressed(kind, size), {}, sysflag=sysflag))
    log.write()
    errors, peak = _inspect_rss(tmp_path / "bomb")
    print(f"\ninspect of a {kind} record claiming {size} bytes: RSS {peak / MB:.1f} MB, "
          f"{(peak - baseline) / MB:.1f} MB over a plain log")
    assert f"corrupt record at offset {placed.offset}" in errors, errors[-2000:]
    assert f"{kind} body: compressed body of" in errors, errors[-2000:]
    assert f"limit of {LIMIT} bytes (max_message_size)" in errors, errors[-2000:]
    assert peak - baseline < 100 * MB, f"inspect grew by {(peak - baseline) / MB:.1f} MB"
