"""The one place that picks what a broker address needs: a registry of target kinds.

``Outbox.broker``'s scheme (:mod:`outbox.targets.address`) names a kind; each
kind's :class:`~outbox.targets.address.KindTraits` names the module whose
``SUPPORT`` (a :class:`TargetSupport`) does everything broker-specific the
outbox needs besides sending and ending through the seam: the publisher, the
start-up probe, and the check-back responder. The module is imported on first
use, as SQLAlchemy loads a dialect for its URL's scheme, so the official
RocketMQ client (grpc, its OpenTelemetry exporters) is loaded for a
``rocketmq://`` address only. Everything that relays or answers check-backs
(the Celery app, Django, Flask, the CLI, ``rocketbox checker``) asks here, so
moving to Apache RocketMQ is a change of that one setting, and a new kind of
broker is a new entry in :data:`~outbox.targets.address.KINDS` and its modules
under ``outbox/targets/``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from broker_lite.extras import missing_extra, needs_extra
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.address import KINDS, Kind
from outbox.targets.base import Publisher

__all__ = ["MessageExporter", "TargetSupport", "export_messages", "export_with",
           "publisher_for", "support_for"]


class MessageExporter(Protocol):
    """A kind's optional ``export_messages``: write what its broker holds to ``out`` as a
    broker export (:func:`outbox.broker_export.write_export`), return how many messages.

    ``source`` names what to read (a stream, a queue) when the kind cannot tell from the
    outbox's settings; None: the kind's default.
    """

    def __call__(self, outbox: Outbox, out: Path, *, source: str | None) -> int: ...


class TargetSupport(Protocol):
    """What a kind of broker does for the outbox beyond the :class:`~outbox.targets.base.Target`
    seam itself (docs/targets.md, "Writing a target").

    Optional: ``export_messages`` (a :class:`MessageExporter`), for a kind whose broker
    keeps no commit log the audit can decode (:func:`export_messages` asks for it; a
    kind without it is audited with ``--commitlog``).
    """

    def publisher(self, outbox: Outbox) -> Publisher:
        """The sync publisher the relay uses (its target on a loop thread)."""
        ...

    def probe(self, outbox: Outbox, *, group: str | None = None) -> Exception | None:
        """Reach the broker once: raise :class:`~outbox.errors.ConfigurationError` for a setup
        that can never work, return an outage (to retry), None when it answered."""
        ...

    def serve_checkbacks(self, outbox: Outbox, stop: threading.Event,
                         on_ready: Callable[[], None] | None, *, threads: int,
                         retry_interval: float) -> None:
        """Answer the broker's check-backs from the status table until ``stop`` is set
        (by :func:`outbox.checkback_rules.answer_checkback`); ``on_ready`` once serving."""
        ...


def support_for(outbox: Outbox) -> TargetSupport:
    """The :class:`TargetSupport` of ``outbox.broker``'s kind (its module loaded now)."""
    return _support(outbox.target_address.kind)


def _support(kind: Kind) -> TargetSupport:
    traits = KINDS[kind]
    if traits.extra is not None and missing_extra(traits.extra):
        raise ConfigurationError(needs_extra(f"the {traits.title} target", traits.extra),
                                 setting="broker")
    support: TargetSupport = importlib.import_module(traits.support_module).SUPPORT
    return support


def publisher_for(outbox: Outbox) -> Publisher:
    """The sync publisher the relay uses for ``outbox.broker``.

    On RocketMQ the relay's producer answers the check-backs the proxy routes
    to it from the status table, as ``rocketbox checker`` does.
    """
    return support_for(outbox).publisher(outbox)


def export_with(support: object, title: str, outbox: Outbox, out: Path, *,
                source: str | None = None) -> int:
    """``support``'s ``export_messages(outbox, out, source=...)``; a support without one
    raises :class:`~outbox.errors.ConfigurationError` naming the kind (``title``)."""
    exporter: MessageExporter | None = getattr(support, "export_messages", None)
    if exporter is None:
        raise ConfigurationError(
            f"the {title} target has no broker export: its broker keeps a commit log, so "
            f"audit it with `rocketbox audit --commitlog DIR`", setting="broker")
    return int(exporter(outbox, out, source=source))


def export_messages(outbox: Outbox, out: Path, *, source: str | None = None) -> int:
    """Write what ``outbox.broker`` holds to ``out`` as a broker export (``rocketbox
    broker-export``), through its kind's optional ``export_messages``."""
    kind = outbox.target_address.kind
    return export_with(_support(kind), KINDS[kind].title, outbox, out, source=source)
