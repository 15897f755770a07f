"""Helpers for the attacks of ``tests/security/``: accounts, raw gRPC, process memory.

* :data:`ACCOUNTS`: the tenants of issue 27 (``root`` admin, ``app`` PUB|SUB on
  Orders, ``bob`` SUB only on A) as an ACL file body;
* :func:`acl_broker`: a real ``broker_lite serve --acl`` with those accounts;
* :func:`raw_grpc`: a bare ``MessagingServiceStub`` and the metadata the official
  client signs its calls with, for requests the client never sends (a GZIP body);
* :func:`rss_bytes` / :func:`peak_rss_bytes`: a process's resident memory now and
  its high-water mark, read from ``/proc/PID/status``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from rocketmq import Credentials
from rocketmq.grpc_protocol import service_pb2_grpc
from rocketmq.v5.util.signature import Signature

from .broker_server import BrokerLiteServer, start_broker_lite

__all__ = ["ACCOUNTS", "SECRETS", "acl_broker", "grpc_metadata", "peak_rss_bytes", "raw_grpc",
           "rss_bytes"]

SECRETS = {"root": "root-secret", "app": "app-secret", "bob": "bob-secret"}

ACCOUNTS: dict[str, Any] = {"accounts": [
    {"access_key": "root", "secret_key": SECRETS["root"], "admin": True,
     "default_topic_perm": "PUB|SUB"},
    {"access_key": "app", "secret_key": SECRETS["app"], "topic_perms": {"Orders": "PUB|SUB"}},
    {"access_key": "bob", "secret_key": SECRETS["bob"], "topic_perms": {"A": "SUB"}},
]}


@contextlib.contextmanager
def acl_broker(root: Path, extra_args: Sequence[str] = ()) -> Iterator[BrokerLiteServer]:
    """A broker run with :data:`ACCOUNTS` as its ACL, its data in ``root / "data"``."""
    acl = root / "acl.json"
    acl.write_text(json.dumps(ACCOUNTS))
    with start_broker_lite(root / "data", ["--acl", str(acl), *extra_args]) as broker:
        yield broker


def grpc_metadata(account: str, client_id: str | None = None, *,
                  date_time: str | None = None) -> list[tuple[str, str]]:
    """The signed metadata the official client sends for ``account``; ``date_time``
    (``20240501T101500Z``) signs that ``x-mq-date-time`` instead of the client's now.
    The client id is ``attack-<account>`` by default: under an ACL a client id belongs
    to the account that first used it."""
    client_id = client_id or f"attack-{account}"

    class _Config:
        credentials = Credentials(account, SECRETS[account])
        namespace = ""

    metadata = list(Signature.metadata(_Config(), client_id))
    if date_time is None:
        return metadata
    header = (f"MQv2-HMAC-SHA1 Credential={account}, SignedHeaders=x-mq-date-time, "
              f"Signature={Signature.sign(SECRETS[account], date_time)}")
    replaced = {"x-mq-date-time": date_time, "authorization": header}
    return [(k, replaced.get(k, v)) for k, v in metadata]


@contextlib.contextmanager
def raw_grpc(endpoint: str) -> Iterator[Any]:
    """A bare ``MessagingServiceStub`` on ``endpoint`` (sync grpc), closed on exit."""
    with grpc.insecure_channel(endpoint, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"/proc/{pid}/status has no {field}")


def rss_bytes(pid: int) -> int:
    """``VmRSS`` of ``pid``: its resident memory now."""
    return _status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` of ``pid``: the most resident memory it ever had."""
    return _status_kib(pid, "VmHWM") * 1024
