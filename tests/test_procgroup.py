"""procgroup.Process: the supervisor the demo, the fixtures and the benchmarks share."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from procgroup import ExitedEarly, NotReady, Process
from tests.support import wait_until

PY = sys.executable

# prints a ready line, then starts a grandchild that ignores SIGTERM and waits forever
_STUBBORN_FAMILY = (
    "import signal, subprocess, sys, threading\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, threading; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(\"child up\", flush=True); threading.Event().wait()'])\n"
    "print(f'ready pid={child.pid}', flush=True)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "threading.Event().wait()\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.timeout(30)
def test_waits_for_the_ready_line_and_kills_the_whole_group(tmp_path: Path) -> None:
    proc = Process([PY, "-c", _STUBBORN_FAMILY], log=tmp_path / "family.log").start()
    grandchild = int(proc.wait_for(r"ready pid=(\d+)\n", 20)[1])
    proc.wait_for("child up", 20)
    assert proc.alive() and _alive(grandchild)
    # both ignore SIGTERM: SIGKILL after the deadline reaches the grandchild too
    assert proc.stop(timeout=0.5) == -signal.SIGKILL
    wait_until(lambda: not _alive(grandchild), timeout=10)
    assert proc.stop() == -signal.SIGKILL  # a second stop is harmless


@pytest.mark.timeout(30)
def test_a_child_that_exits_first_fails_the_wait_with_its_status_and_log(tmp_path: Path
                                                                          ) -> None:
    proc = Process([PY, "-c", "import sys; print('cannot bind'); sys.exit(3)"],
                   log=tmp_path / "early.log", name="server").start()
    with pytest.raises(ExitedEarly) as info:
        proc.wait_for("ready", 20)
    assert info.value.returncode == 3 and info.value.name == "server"
    assert "cannot bind" in info.value.tail and "exited with 3" in str(info.value)


@pytest.mark.timeout(30)
def test_the_deadline_fails_the_wait_and_names_what_was_awaited(tmp_path: Path) -> None:
    waits = "import threading; print('starting', flush=True); threading.Event().wait()"
    with Process([PY, "-c", waits],
                 log=tmp_path / "slow.log") as proc:
        proc.start().wait_for("starting", 20)
        with pytest.raises(NotReady, match=r"'ready'\) within 0.3s(.|\n)*starting"):
            proc.wait_for("ready", 0.3)
        assert proc.alive()
    assert not proc.alive() and proc.returncode == -signal.SIGTERM


@pytest.mark.timeout(30)
def test_stderr_to_its_own_file_and_a_restart_appends_to_the_log(tmp_path: Path) -> None:
    script = "import sys; print('out', flush=True); print('err', file=sys.stderr)"
    proc = Process([PY, "-c", script], log=tmp_path / "out.log", stderr=tmp_path / "err.log")
    for _ in range(2):
        assert proc.start().wait(20) == 0
    assert proc.starts == 2
    assert proc.output() == "out\nout\n" and proc.errors() == "err\nerr\n"
