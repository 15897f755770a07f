"""Each missing extra fails with one line that names it (issue 30, ``broker_lite.extras``).

The suite's venv has every extra, so each check runs in a fresh interpreter whose
``sys.modules`` maps the extra's packages to ``None``: ``import grpc`` then raises
ModuleNotFoundError, as on an install without the extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROCKETMQ = ("grpc", "google.protobuf", "rocketmq")
ROCKETMQ_LINE = "needs the 'rocketmq' extra: pip install 'rocketbox[rocketmq]'"


def run_without(blocked: tuple[str, ...], code: str, cwd: Path
                ) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys\nfor _m in {list(blocked)!r}: sys.modules[_m] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def stderr_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


@pytest.fixture
def migrated_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    done = subprocess.run([sys.executable, "-m", "outbox", "migrate", "--db", url],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return url


@pytest.mark.timeout(200)
@pytest.mark.parametrize("command", ["relay", "checker"])
def test_rocketbox_on_a_rocketmq_address_without_the_extra_says_which_extra(
        command: str, migrated_db: str, tmp_path: Path) -> None:
    argv = [command, "--db", migrated_db, "--broker", "rocketmq://127.0.0.1:1"]
    done = run_without(ROCKETMQ, f"from outbox.cli import main\nsys.exit(main({argv!r}))",
                       tmp_path)
    assert done.returncode == 2, done.stderr
    assert stderr_lines(done) == [f"rocketbox {command}: the RocketMQ target {ROCKETMQ_LINE}"]


@pytest.mark.timeout(200)
def test_choosing_the_rocketmq_target_without_the_extra_raises_one_configuration_error(
        tmp_path: Path) -> None:
    code = ("from sqlalchemy import create_engine\n"
            "from outbox import Outbox\n"
            "from outbox.errors import ConfigurationError\n"
            "from outbox.targets.choose import publisher_for\n"
            "outbox = Outbox(engine=create_engine('sqlite://'), broker='rocketmq://127.0.0.1:1')\n"
            "try:\n"
            "    publisher_for(outbox)\n"
            "except ConfigurationError as exc:\n"
            "    print(exc)\n")
    done = run_without(ROCKETMQ, code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"the RocketMQ target {ROCKETMQ_LINE}"


@pytest.mark.timeout(200)
def test_broker_lite_asked_for_a_grpc_port_without_the_extra_says_which_extra(
        tmp_path: Path) -> None:
    argv = ["serve", "--data-dir", str(tmp_path / "data"), "--port", "0", "--grpc-port", "0"]
    done = run_without(ROCKETMQ, f"from broker_lite.cli import main\nsys.exit(main({argv!r}))",
                       tmp_path)
    assert done.returncode == 2, done.stderr
    assert stderr_lines(done) == [
        f"broker-lite serve: invalid configuration: --grpc-port: the gRPC door {ROCKETMQ_LINE}"]
    assert done.stdout == ""


@pytest.mark.timeout(200)
def test_an_lz4_body_without_the_compression_extra_says_which_extra(tmp_path: Path) -> None:
    code = ("from broker_lite.errors import ConfigurationError\n"
            "from broker_lite.storage.inflate import inflate_lz4\n"
            "try:\n"
            "    inflate_lz4(b'\\x04\"M\\x18', 100)\n"
            "except ConfigurationError as exc:\n"
            "    print(exc)\n")
    done = run_without(("lz4",), code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("a LZ4-compressed body needs the 'compression' extra: "
                                   "pip install 'rocketbox[compression]'")


@pytest.mark.timeout(200)
def test_rocketbox_console_without_the_extra_says_which_extra(migrated_db: str,
                                                              tmp_path: Path) -> None:
    argv = ["console", "--db", migrated_db, "--broker", "127.0.0.1:1"]
    done = run_without(("starlette", "jinja2", "uvicorn"),
                       f"from outbox.cli import main\nsys.exit(main({argv!r}))", tmp_path)
    assert done.returncode == 2, done.stderr
    assert stderr_lines(done) == [
        "rocketbox console: the console needs the 'console' extra: "
        "pip install 'rocketbox[console]'"]


@pytest.mark.timeout(200)
def test_rocketbox_audit_without_the_spark_extra_says_which_extra(tmp_path: Path) -> None:
    commitlog = tmp_path / "commitlog"
    commitlog.mkdir()
    argv = ["audit", "--jdbc-url", f"jdbc:sqlite:{tmp_path / 'outbox.db'}",
            "--commitlog", str(commitlog)]
    done = run_without(("pyspark", "py4j"),
                       f"from outbox.cli import main\nsys.exit(main({argv!r}))", tmp_path)
    assert done.returncode == 2, done.stderr
    assert stderr_lines(done) == [
        "rocketbox audit: the audit needs the 'spark' extra: pip install 'rocketbox[spark]'"]
