"""The names issue 30 renamed still work, and warn (tests for the deprecated aliases)."""

from __future__ import annotations

import importlib

import pytest

from outbox.errors import ConfigurationError

OLD_TO_NEW = [
    ("outbox.checker", "outbox.checkback_runner", "run_checker"),
    ("outbox.checkback", "outbox.checkback_rules", "check_state"),
    ("outbox.core_commit", "outbox.sqla_core_commit", "remember"),
    ("outbox.logging", "outbox.log_setup", "configure_logging"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("old", "new", "name"), OLD_TO_NEW)
def test_old_module_forwards_with_a_warning(old: str, new: str, name: str) -> None:
    old_module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=new):
        value = getattr(old_module, name)
    assert value is getattr(importlib.import_module(new), name)


@pytest.mark.timeout(60)
def test_run_worker_refuses_both_sweeper_and_beat() -> None:
    from outbox.celery.worker import run_worker
    from outbox.config import Outbox
    with pytest.raises(ConfigurationError, match="beat="):
        run_worker(Outbox.__new__(Outbox), celery_broker="memory://", celery_backend=None,
                   concurrency=1, loglevel="INFO", sweeper=True, beat=True)


@pytest.mark.timeout(60)
def test_left_to_checkback_keeps_its_old_spelling() -> None:
    import outbox.targets
    from outbox.targets.base import LeftToCheckback
    with pytest.warns(DeprecationWarning, match="LeftToCheckback"):
        old = outbox.targets.LeftToCheckBack
    assert old is LeftToCheckback
