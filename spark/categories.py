"""The audit's categories: their order, which ones are divergent, and what to do about each.

:mod:`spark.classify` decides them; the reports (:mod:`spark.report`,
:mod:`spark.html_report`) show them in :data:`CATEGORIES` order, with the
:data:`ACTIONS` text next to each divergent category that has tx_ids.
"""

from __future__ import annotations

__all__ = ["ACTIONS", "CATEGORIES", "DIVERGENT", "INVARIANT", "RECHECK"]

CATEGORIES = ("ok", "lost", "phantom", "duplicate", "payload_mismatch", "parked",
              "undelivered", "stuck_half", "discarded", "late", "pending")
#: categories that make the audit exit 1 (everything that needs someone to act)
DIVERGENT = tuple(c for c in CATEGORIES if c not in ("ok", "pending"))
#: the divergences that break the outbox's guarantee (the broker and the DB disagree
#: about what was committed), as opposed to work the outbox still holds or is late with
INVARIANT = ("lost", "phantom", "duplicate", "payload_mismatch")
#: ids the incremental mode checks again at its next run, whatever its window
RECHECK = ("pending", "parked", "undelivered")

#: what to do about each divergent category (docs/audit.md says the same, at length)
ACTIONS = {
    "lost": "the outbox recorded a relay the broker has no commit for: check the broker's "
            "data (a restore, a deleted or corrupt segment); to send it again, clear the "
            "row's relayed_at",
    "phantom": "the broker delivered a message whose DB transaction did not commit: "
               "compensate downstream; find what rolled back or deleted the row",
    "duplicate": "the broker committed the transaction twice: consumers must dedupe "
                 "(the inbox does); report it, it is a broker bug",
    "payload_mismatch": "the row's body changed after it was relayed: find the writer; "
                        "consumers got the committed body",
    "parked": "the relay gave up after its attempts: read last_error "
              "(`rocketbox status`), fix the cause, then `rocketbox replay`",
    "undelivered": "not relayed after --grace, the relay still owes it: is `rocketbox relay` "
                   "running and the broker reachable? (`rocketbox status`)",
    "stuck_half": "the broker holds a half nobody resolves: is the check-back responder "
                  "running for the producer group?",
    "discarded": "the broker gave up checking the half (TRANS_CHECK_MAX_TIME_TOPIC): "
                 "check the check-back responder; the DB row decides whether to send it again",
    "late": "visible after --slo: look at the relay's backlog and restarts at that time",
}
