"""Credentials: a broker run with ``--acl`` takes signed clients and refuses the rest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broker_lite.client import Message, Producer, PullConsumer
from broker_lite.errors import NoPermissionError, UnauthorizedError
from tests.broker_lite.client.client_support import StartBroker, drain

ACL = {"accounts": [
    {"access_key": "writer", "secret_key": "w-secret", "topic_perms": {"Orders": "PUB"},
     "default_group_perm": "DENY"},
    {"access_key": "reader", "secret_key": "r-secret", "topic_perms": {"Orders": "SUB"},
     "group_perms": {"billing": "SUB"}, "default_group_perm": "DENY"},
]}


@pytest.mark.timeout(60)
def test_signed_clients_work_and_others_are_refused(start_broker: StartBroker,
                                                     tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    with start_broker("--acl", str(acl)) as broker:
        with Producer("pg", broker.native, access_key="writer",
                      secret_key="w-secret") as producer:
            sent = producer.send(Message("Orders", "signed"))
            with pytest.raises(NoPermissionError):
                producer.send(Message("Other", "not allowed"))
        with PullConsumer("billing", broker.native, access_key="reader",
                          secret_key="r-secret") as consumer:
            [got] = drain(consumer, "Orders", 1)
            assert got.msg_id == sent.msg_id
        for key, secret in (("writer", "wrong"), ("nobody", "x")):
            with pytest.raises(UnauthorizedError):
                Producer("pg", broker.native, access_key=key, secret_key=secret).start()
        with pytest.raises(UnauthorizedError):
            Producer("pg", broker.native).start()
        result = subprocess.run(
            [sys.executable, "-m", "broker_lite", "send", "--server", broker.native,
             "--topic", "Orders", "--body", "cli", "--access-key", "writer",
             "--secret-key", "w-secret"], capture_output=True, text=True, timeout=30,
            check=False)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["topic"] == "Orders"
