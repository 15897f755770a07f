"""rocketbox's outbox side: the status table, ``publish``, the relay and the check-back.

A unit of work writes its business rows and a status row (the message) in one
database transaction; the relay turns committed rows into committed broker
messages; the broker's check-back reads the status table. See docs/design.md §3.
The Celery integration lives in :mod:`outbox.celery` (imported on demand, so
``import outbox`` does not import Celery).

``import outbox`` is light: each public name below is imported from its module
the first time it is used (``outbox.publish``, ``from outbox import Outbox``),
so a program pays for SQLAlchemy, the broker client or the relay only when it
uses them, and never loads gRPC, the RocketMQ client, Celery, prometheus_client
or Rich unless it uses what needs them (tests/outbox/test_import_weight.py).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outbox.checkback_rules import PG_XID_PROPERTY, CheckAnswer, check_state
    from outbox.checkback_runner import CheckbackResponder, run_checker
    from outbox.config import Mode, Outbox, RelaySettings
    from outbox.errors import (
        BrokerUnreachableError,
        ConfigurationError,
        InvalidMessageError,
        NoTransactionError,
        OutboxError,
        RelayError,
        RowFault,
        RowRefusedError,
        SerializationError,
    )
    from outbox.half_first import SqlStatusListener, send_in_transaction
    from outbox.inbox import InboxConsumer, consumer
    from outbox.models import InboxRow, TransactionRow, metadata
    from outbox.publish import new_tx_id, publish
    from outbox.relay import Relay, RelayReport
    from outbox.serializers import JsonSerializer, RawSerializer, Serializer
    from outbox.targets import Publisher, Target, TargetPublisher
    from outbox.targets.broker_lite import BrokerLitePublisher

__all__ = [
    "PG_XID_PROPERTY",
    "BrokerLitePublisher",
    "BrokerUnreachableError",
    "CheckAnswer",
    "CheckbackResponder",
    "ConfigurationError",
    "InboxConsumer",
    "InboxRow",
    "InvalidMessageError",
    "JsonSerializer",
    "Mode",
    "NoTransactionError",
    "Outbox",
    "OutboxError",
    "Publisher",
    "RawSerializer",
    "Relay",
    "RelayError",
    "RelayReport",
    "RelaySettings",
    "RowFault",
    "RowRefusedError",
    "SerializationError",
    "Serializer",
    "SqlStatusListener",
    "Target",
    "TargetPublisher",
    "TransactionRow",
    "check_state",
    "consumer",
    "metadata",
    "new_tx_id",
    "publish",
    "run_checker",
    "send_in_transaction",
]

#: public name -> the module that defines it (imported on first use, module docstring)
_HOME: dict[str, str] = {
    "BrokerLitePublisher": "outbox.targets.broker_lite",
    "BrokerUnreachableError": "outbox.errors",
    "CheckAnswer": "outbox.checkback_rules",
    "CheckbackResponder": "outbox.checkback_runner",
    "ConfigurationError": "outbox.errors",
    "InboxConsumer": "outbox.inbox",
    "InboxRow": "outbox.models",
    "InvalidMessageError": "outbox.errors",
    "JsonSerializer": "outbox.serializers",
    "Mode": "outbox.config",
    "NoTransactionError": "outbox.errors",
    "Outbox": "outbox.config",
    "OutboxError": "outbox.errors",
    "PG_XID_PROPERTY": "outbox.checkback_rules",
    "Publisher": "outbox.targets",
    "RawSerializer": "outbox.serializers",
    "Relay": "outbox.relay",
    "RelayError": "outbox.errors",
    "RelayReport": "outbox.relay",
    "RelaySettings": "outbox.config",
    "RowFault": "outbox.errors",
    "RowRefusedError": "outbox.errors",
    "SerializationError": "outbox.errors",
    "Serializer": "outbox.serializers",
    "SqlStatusListener": "outbox.half_first",
    "Target": "outbox.targets",
    "TargetPublisher": "outbox.targets",
    "TransactionRow": "outbox.models",
    "check_state": "outbox.checkback_rules",
    "consumer": "outbox.inbox",
    "metadata": "outbox.models",
    "new_tx_id": "outbox.publish",
    "publish": "outbox.publish",
    "run_checker": "outbox.checkback_runner",
    "send_in_transaction": "outbox.half_first",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:  # a submodule (``outbox.models``), as the eager imports used to bind
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Keeps ``outbox.publish`` the function when the module of that name is imported.

    Importing a submodule binds it on its package; the eager ``from outbox.publish
    import publish`` this file used to run rebound the function after that. Loading
    on first use, the function is bound once, and a later import of the submodule
    must not replace it.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _HOME.get(name) == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
