"""What a JetStream stream must be for the NATS target: subjects, duplicate window, storage.

No client is imported here: these are the rules (docs/nats.md), used by the
target before it publishes to a stream, by the start-up probe, and by
:func:`stream_settings` to create a stream that keeps them.

* **Subjects.** A row goes to the subject ``TOPIC`` when it has no message
  group, and to ``TOPIC.GROUP`` when it has one (:func:`subject_for`; the
  group is one subject token, its characters outside ``[A-Za-z0-9_-]``
  percent-encoded). A stream for a topic binds ``TOPIC`` and ``TOPIC.>``
  (:func:`topic_subjects`). One topic's rows go to one stream.
* **Duplicate window.** The relay publishes each row with ``Nats-Msg-Id`` set
  to its ``tx_id``; the stream drops a second message with that id only while
  the first is younger than its ``duplicate_window``. The window must outlast
  the relay's longest retry of one row (:func:`longest_retry`): 437 s on the
  default :class:`~outbox.config.RelaySettings`, so the docs say 10 minutes.
* **Storage** ``file``: a memory stream loses every message when its server
  restarts (the target warns once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outbox.config import RelaySettings

__all__ = ["GROUP_SAFE", "StreamFacts", "longest_retry", "stream_problem", "stream_settings",
           "subject_for", "topic_subjects"]

#: the characters a message group keeps in its subject token; the rest are %XX (UTF-8)
GROUP_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _token(group: str) -> str:
    return "".join(c if c in GROUP_SAFE else "".join(f"%{b:02X}" for b in c.encode())
                   for c in group)


def subject_for(topic: str, message_group: str | None) -> str:
    """The subject a row of ``topic`` (and ``message_group``) is published to."""
    return topic if not message_group else f"{topic}.{_token(message_group)}"


def topic_subjects(topic: str) -> list[str]:
    """The subjects a stream binds to take every row of ``topic``."""
    return [topic, f"{topic}.>"]


def longest_retry(relay: RelaySettings) -> float:
    """Seconds from a row's first publish to the relay's last re-send of it, at most.

    A row is published again when the relay did not see its ack (a timeout,
    a lost connection) or died before marking it: the claim's lease
    (``lease_seconds``) runs out, then up to ``max_attempts`` attempts, each
    taking up to ``broker_timeout`` and backing off by up to
    ``min(backoff_max, backoff_base * 2**(n-1))`` plus ``jitter`` of it.
    An outage counts no attempt, so a re-send after a longer outage can still
    come later than this: the inbox drops that one (docs/nats.md).
    """
    backoff = sum(min(relay.backoff_max, relay.backoff_base * 2.0 ** (n - 1))
                  for n in range(1, relay.max_attempts))
    return (relay.lease_seconds + backoff * (1 + relay.jitter)
            + relay.max_attempts * relay.broker_timeout)


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What the target reads of a stream's configuration."""

    name: str
    #: seconds
    duplicate_window: float
    #: ``file`` or ``memory``
    storage: str


def stream_problem(facts: StreamFacts, relay: RelaySettings) -> str | None:
    """Why the relay must not publish to this stream (its duplicate window), or None."""
    needed = longest_retry(relay)
    if facts.duplicate_window < needed:
        return (f"JetStream stream {facts.name!r}: duplicate_window is "
                f"{facts.duplicate_window:g}s, shorter than the relay's longest retry "
                f"{needed:g}s (lease_seconds, max_attempts, backoff_*, broker_timeout), so a "
                f"re-sent row could be stored twice; set the stream's duplicate_window to at "
                f"least {needed:.0f}s (nats stream edit {facts.name} --dupe-window "
                f"{_minutes(needed)}m; docs/nats.md)")
    return None


def _minutes(seconds: float) -> int:
    return max(1, -(-int(seconds) // 60))


def stream_settings(name: str, topics: list[str], relay: RelaySettings) -> dict[str, Any]:
    """The settings of a stream for ``topics`` that keeps the rules: ``add_stream(**these)``.

    Its duplicate window is the relay's longest retry rounded up to whole
    minutes (at least two, the server's default).
    """
    subjects = [s for topic in topics for s in topic_subjects(topic)]
    window = 60.0 * max(2, _minutes(longest_retry(relay)))
    return {"name": name, "subjects": subjects, "storage": "file",
            "duplicate_window": window}
