"""``rocketbox demo`` finds the source checkout's demo, and says what it needs without one."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from outbox.demo import NEEDS_CHECKOUT, find_checkout
from tests.demo.demo_support import processes_mentioning
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(10)
def test_the_checkout_is_the_outbox_package_s_parent() -> None:
    assert find_checkout(REPO / "outbox") == REPO


@pytest.mark.timeout(10)
def test_a_package_without_the_demo_beside_it_has_no_checkout(tmp_path: Path) -> None:
    (tmp_path / "outbox").mkdir()
    (tmp_path / "examples" / "flask_shop").mkdir(parents=True)
    assert find_checkout(tmp_path / "outbox") is None


@pytest.mark.timeout(60)
def test_from_an_install_without_the_checkout_it_says_what_it_needs(tmp_path: Path) -> None:
    # what a wheel has: the outbox package in site-packages, no examples/ or procgroup/
    site = tmp_path / "site-packages"
    (site / "outbox").mkdir(parents=True)
    (site / "outbox" / "__init__.py").write_text("")
    shutil.copy(REPO / "outbox" / "demo.py", site / "outbox" / "demo.py")
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
         "from outbox.demo import main; sys.exit(main(['--quick']))"],
        cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr == NEEDS_CHECKOUT + "\n" and done.stdout == ""
    assert "source checkout" in done.stderr and "make demo" in done.stderr


@pytest.mark.timeout(60)
def test_from_the_checkout_it_runs_the_demo_with_every_argument() -> None:
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: rocketbox demo") and "--orders" in done.stdout


@pytest.mark.timeout(180)
def test_sigterm_to_rocketbox_demo_stops_the_demo_and_every_part(tmp_path: Path) -> None:
    work = tmp_path / "demo-run"
    launcher = subprocess.Popen([sys.executable, "-m", "outbox", "demo", "--quick", "--dir",
                                 str(work)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        broker_log = work / "logs" / "broker.log"
        wait_until(lambda: broker_log.exists() and "ready" in broker_log.read_text(),
                   timeout=120, message="the demo's broker did not start")
        assert processes_mentioning(str(work))  # its parts are up
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(120) == 130  # the demo stopped as on Ctrl-C
        wait_until(lambda: processes_mentioning(str(work)) == [], timeout=30,
                   message=lambda: "\n".join(processes_mentioning(str(work))))
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(launcher.pid)], check=False)
        launcher.wait(30)
