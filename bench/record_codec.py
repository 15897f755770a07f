"""The commit-log record codec alone: this tree's against the one committed at ``--base``.

Usage::

    .venv/bin/python bench/record_codec.py [--base REV] [--records N] [--repeat K]

Encodes and verifies N records of 1 KiB bodies with each codec, interleaved,
K times, timing CPU time (``time.process_time``) so that other work on the
machine matters less, and prints the best run of each and the speed of ours
relative to the base (1.0 = as fast). Prints only.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from types import ModuleType, SimpleNamespace
from typing import Any

from _common import REPO_ROOT, TMP_DIR, add_repository_paths

add_repository_paths()

from broker_lite.storage import record, record_encoder  # noqa: E402
from broker_lite.storage.properties import encode_properties  # noqa: E402

BODY = b"x" * 1024
PROPS = encode_properties({"TAGS": "t", "UNIQ_KEY": "B" + "0" * 31})
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
#: this tree's codec, shaped like one module (the base's record.py held both halves)
ours = SimpleNamespace(encode_record_fast=record_encoder.encode_record_fast,
                       encode_record_into=record_encoder.encode_record_into,
                       record_size=record_encoder.record_size,
                       verify_record=record.verify_record)


def load_base(rev: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{rev}:broker_lite/storage/record.py"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout
    path = TMP_DIR / "record_base.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("record_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["record_base"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def encode_all(mod: Any, n: int) -> tuple[float, bytes]:
    """Encode ``n`` records into one buffer the way the store gets them into its mapping.

    The base (a ``record.py`` with ``encode_record_fast`` only) returns bytes,
    copied into place as its store did; ours encodes in place with
    ``encode_record_into``, as :meth:`MessageStore.put_nowait` does.
    """
    size = len(mod.encode_record_fast(b"BenchTopic", BODY, PROPS, 0, 0, 0, 0, 0, 1, HOST, 2,
                                      HOST, 0, 0))
    buf = bytearray(size * n)
    into = getattr(mod, "encode_record_into", None)
    pos = 0
    started = time.process_time()
    if into is None:
        encode = mod.encode_record_fast
        for i in range(n):
            data = encode(b"BenchTopic", BODY, PROPS, i % 8, 0, i, i, 0, 1, HOST, 2, HOST, 0, 0)
            buf[pos : pos + size] = data
            pos += size
    else:
        record_size = mod.record_size
        for i in range(n):
            size = record_size(len(BODY), 10, len(PROPS))
            pos = into(buf, pos, size, b"BenchTopic", BODY, PROPS, i % 8, 0, i, i, 0, 1, HOST,
                       2, HOST, 0, 0)
    return time.process_time() - started, bytes(buf)


def verify_all(mod: Any, data: bytes) -> float:
    view, pos, limit = memoryview(data), 0, len(data)
    started = time.process_time()
    while pos < limit:
        checked = mod.verify_record(view, pos, limit)
        if isinstance(checked, str):
            raise RuntimeError(checked)  # physical offsets are not positions: not checked
        pos += checked[0]
    return time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="49302c8", help="the commit to compare with")
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    base = load_base(args.base)
    times: dict[str, list[float]] = {k: [] for k in ("enc base", "enc ours", "ver base",
                                                     "ver ours")}
    for _ in range(args.repeat):
        t, base_data = encode_all(base, args.records)
        times["enc base"].append(t)
        t, our_data = encode_all(ours, args.records)
        times["enc ours"].append(t)
        times["ver base"].append(verify_all(base, base_data))
        times["ver ours"].append(verify_all(ours, our_data))
    best = {k: min(v) for k, v in times.items()}
    for op, name in (("enc", "encode"), ("ver", "verify")):
        base_s, ours_s = best[op + " base"], best[op + " ours"]
        print(f"{name}: base {args.records / base_s:,.0f}/s, ours {args.records / ours_s:,.0f}"
              f"/s, ours/base speed {base_s / ours_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
