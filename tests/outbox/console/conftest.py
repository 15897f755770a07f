"""The console tests share one stack of real servers (see console_stack.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.outbox.console.console_stack import Stack, running_stack
from tests.support import PostgresServer


@pytest.fixture(scope="module")
def stack(postgres_server: PostgresServer, redis_url: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(postgres_server, redis_url, tmp_path_factory.mktemp("console")) as state:
        yield state
