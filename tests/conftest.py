"""Session-wide fixtures: real PostgreSQL, Redis and broker_lite on loopback.

The logic lives in ``tests/support``; this file only wires it to pytest.
A server whose binary is missing skips its tests locally and fails them when
``CI=true``. Tests that use the PostgreSQL or Redis fixtures are marked
``postgres`` / ``redis`` automatically, so ``-m "not postgres"`` deselects
them. Slow tests run by default; deselect them with ``-m "not slow"``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import pytest

from tests.support import (
    BrokerLiteServer,
    PostgresServer,
    RedisServer,
    ServerUnavailable,
    start_broker_lite,
    start_postgres,
    start_redis,
)

if TYPE_CHECKING:
    from tests.support.nats_server import NatsServer
    from tests.support.rabbitmq_server import RabbitMQServer

T = TypeVar("T")

# fixture name -> marker that any test using it (even indirectly) gets
_FIXTURE_MARKERS = {
    "postgres_server": "postgres",
    "postgres_url": "postgres",
    "redis_server": "redis",
    "redis_url": "redis",
}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def _unavailable(exc: ServerUnavailable) -> NoReturn:
    if _in_ci():
        pytest.fail(f"{exc} (CI=true, so a missing server is a failure)", pytrace=False)
    pytest.skip(str(exc))


def _enter(stack: contextlib.ExitStack, server: contextlib.AbstractContextManager[T]) -> T:
    try:
        return stack.enter_context(server)
    except ServerUnavailable as exc:
        missing = exc
    _unavailable(missing)  # outside the except block: no chained traceback


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker in sorted({m for f, m in _FIXTURE_MARKERS.items() if f in used}):
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    with contextlib.ExitStack() as stack:
        yield _enter(stack, start_postgres())


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """SQLAlchemy URL (``postgresql+psycopg://``); ``postgres_server.libpq_url`` is plain."""
    return postgres_server.url


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with contextlib.ExitStack() as stack:
        yield _enter(stack, start_redis())


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """nats-server with JetStream on loopback, for the session (tests/support/nats_server.py)."""
    from tests.support.nats_server import start_nats

    with contextlib.ExitStack() as stack:
        yield _enter(stack, start_nats())


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitMQServer]:
    """One RabbitMQ node for the session (tests/support/rabbitmq_server.py)."""
    from tests.support.rabbitmq_server import start_rabbitmq

    with contextlib.ExitStack() as stack:
        yield _enter(stack, start_rabbitmq())


@pytest.fixture
def broker_lite_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[BrokerLiteServer]:
    """A fresh broker_lite per test; extra ``serve`` args via indirect parametrize."""
    extra: tuple[str, ...] = tuple(getattr(request, "param", ()))
    with start_broker_lite(tmp_path / "broker", extra) as server:
        yield server
