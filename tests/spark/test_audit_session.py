"""The audit's Spark session opens no port beyond loopback and no web UI (issue 14).

A child process builds the session with :func:`spark.session.build_session`
(the driver's RPC, block manager and py4j servers are up once it returns) and
holds it while the test reads which sockets the child, its JVM and their
descendants listen on (``/proc/<pid>/fd`` against ``/proc/net/tcp`` and
``tcp6``).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
_CHILD = """
import sys
from spark.session import build_session
spark = build_session(master="local[1]")
print(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
sys.stdin.readline()
spark.stop()
"""
_LISTEN = "0A"


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, parent in parents.items() if parent == pid and p not in found]
        found.update(kids)
        todo.extend(kids)
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _address(hex_ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_ip)  # /proc/net/tcp*: 32-bit words in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _listening(inodes: set[str]) -> list[tuple[str, int]]:
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and inode in inodes:
                hex_ip, hex_port = local.split(":")
                found.append((str(_address(hex_ip)), int(hex_port, 16)))
    return found


@pytest.mark.timeout(300)  # a JVM start; minutes on a loaded 2-core machine
def test_audit_session_listens_on_loopback_only_and_has_no_ui() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("SPARK_LOCAL_IP", None)
    child = subprocess.Popen([sys.executable, "-c", _CHILD], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    try:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()  # the session is up
        assert line.strip().isdigit(), f"child exited {child.poll()} before its session was up"
        pids = _descendants(child.pid) | _descendants(int(line))
        listening = _listening(_socket_inodes(pids))
        assert listening  # the py4j gateway at least: the check does see the JVM's sockets
        assert [(host, port) for host, port in listening
                if not ipaddress.ip_address(host).is_loopback] == []
        assert 4040 not in {port for _host, port in listening}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
