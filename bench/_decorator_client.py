"""bench/decorator.py's client process: batches of POSTs, their latencies sent back.

:func:`client_main` runs in a process of its own (``multiprocessing``,
spawn): for each job the parent sends (route, requests, threads) it runs
that many client threads (``http.client``, one connection each, sequential
requests) and answers the latencies in nanoseconds and the wall time
(:func:`run_batch` is the parent's end). :func:`percentile` reads them.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection as Pipe

__all__ = ["HEADERS", "PAYLOAD", "client_main", "percentile", "run_batch"]

PAYLOAD = json.dumps({"item": "tea", "qty": 2}).encode()
HEADERS = {"Content-Type": "application/json", "Connection": "keep-alive"}


def _client_thread(conn: http.client.HTTPConnection, path: str, n: int,
                   out: list[int]) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        conn.request("POST", path, body=PAYLOAD, headers=HEADERS)
        resp = conn.getresponse()
        resp.read()
        out.append(clock() - start)
        if resp.status != 201:
            raise RuntimeError(f"{path} answered {resp.status}")


def client_main(pipe: Pipe, port: int) -> None:
    """Run in a separate process: do the batches the parent asks for, send latencies back."""
    conns: dict[tuple[str, int], http.client.HTTPConnection] = {}
    while True:
        job = pipe.recv()
        if job is None:
            break
        route, n, concurrency = job
        threads, outs = [], []
        per = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
        t0 = time.perf_counter()
        for i in range(concurrency):
            key = (route, i)
            if key not in conns:
                conns[key] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            out: list[int] = []
            outs.append(out)
            threads.append(threading.Thread(target=_client_thread,
                                            args=(conns[key], f"/{route}", per[i], out)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        lat = [x for out in outs for x in out]
        pipe.send((lat, elapsed))
    for c in conns.values():
        c.close()


def run_batch(pipe: Pipe, route: str, n: int, concurrency: int) -> tuple[list[int], float]:
    pipe.send((route, n, concurrency))
    lat, elapsed = pipe.recv()
    return lat, elapsed


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """Nearest-rank percentile of sorted nanoseconds, in microseconds."""
    idx = min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns)) - 1))
    return sorted_ns[idx] / 1000.0
