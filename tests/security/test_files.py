"""Private files (issue 27, item 8): the data directory is 0700 and its files 0600.

The broker runs under umask 000 (the worst an operator's shell can give it), in
a data directory whose parent every local user may enter. After real traffic on
both doors (sends with keys, a consumer's committed offsets, a gRPC consumer's
in-flight message in ``pop.json``, a topic created), the user ``nobody`` tries
to list the directory, read each file, and grep the bodies for a card number,
and fails each time; a control file next to the data directory shows that
``nobody`` can read what is not protected. The broker still serves, and comes
back on the same data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

from broker_lite.client import Admin, Message, Producer, PullConsumer
from tests.support import start_broker_lite, wait_until

pytestmark = [pytest.mark.grpc,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"),
                                 reason="needs root and runuser to act as nobody")]

SECRET = "SECRET-ORDER card=4111111111111111"


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A directory every local user may enter and list (0755 under /tmp), removed after."""
    parent = Path(tempfile.mkdtemp(prefix="rocketbox-files-", dir="/tmp"))
    parent.chmod(0o755)
    try:
        yield parent
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True,
                          text=True, timeout=60, check=False)


def _modes(root: Path) -> dict[str, str]:
    """Every path under ``root`` (itself included) -> its permission bits in octal."""
    found = {".": oct(stat.S_IMODE(root.stat().st_mode))}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = oct(stat.S_IMODE(path.lstat().st_mode))
    return found


def _traffic(native: str, grpc: str) -> None:
    with Admin(native) as admin:
        admin.create_topic("Private", queues=2)
    with Producer("files", native) as producer:
        for i in range(5):
            producer.send(Message("Private", f"{SECRET} #{i}", keys=(f"order-{i}",)))
    with PullConsumer("billing", native) as consumer:
        for queue_id in consumer.assignment("Private"):
            result = consumer.pull("Private", queue_id, 0, 32)
            consumer.commit("Private", queue_id, result.next_offset)
    consumer_g = SimpleConsumer(ClientConfiguration(grpc, Credentials("", ""), request_timeout=10),
                                "auditors", {"Private": FilterExpression()}, await_duration=1)
    consumer_g.startup()
    try:
        wait_until(lambda: consumer_g.receive(4, 60), timeout=60,
                   ignore=(Exception,), message="the gRPC consumer got nothing")
    finally:
        consumer_g.shutdown()


@pytest.mark.timeout(240)
def test_no_other_user_reads_the_data_directory_even_under_umask_000(open_parent: Path) -> None:
    data = open_parent / "data"
    control = open_parent / "control.txt"
    control.write_text(SECRET)
    control.chmod(0o644)
    assert _as_nobody("cat", str(control)).stdout == SECRET  # the attacker can read open files
    with _umask(0), start_broker_lite(data) as broker:
        _traffic(broker.native, broker.grpc)
        wait_until(lambda: (data / "pop.json").exists(), timeout=60,
                   message="pop.json was never saved")
        modes = _modes(data)
        names = set(modes)
        for expected in ("commitlog", "consumequeue", "pop.json", "checkpoint", "index"):
            assert any(n == expected or n.startswith(expected + "/") for n in names), \
                (expected, sorted(names))
        assert any("offset" in n or "topics" in n for n in names), sorted(names)
        loose = {n: m for n, m in modes.items()
                 if m != ("0o700" if (data / n).is_dir() else "0o600")}
        assert not loose, f"not private: {loose}"
        listing = _as_nobody("ls", str(data))
        assert listing.returncode != 0 and "Permission denied" in listing.stderr
        for name in names - {"."}:
            read = _as_nobody("cat", str(data / name))
            assert read.returncode != 0 and SECRET not in read.stdout, name
        hunt = _as_nobody("grep", "-r", "-a", "-l", "card=4111", str(open_parent))
        assert hunt.stdout.strip().splitlines() == [str(control)], hunt.stdout
        with Producer("files", broker.native) as producer:  # the owner's broker still works
            producer.send(Message("Private", "after the attack"))
    with _umask(0), start_broker_lite(data) as broker, \
            PullConsumer("late", broker.native) as consumer:
        bodies = [m.body for q in consumer.assignment("Private")
                  for m in consumer.pull("Private", q, 0, 32).messages]
        assert b"after the attack" in bodies and len(bodies) == 6
        assert all(m in ("0o700", "0o600") for m in _modes(data).values())
