"""``rocketbox status`` in a terminal: an :class:`~outbox.status.OutboxStatus` as Rich tables.

:mod:`outbox.status` reads the numbers; this module only draws them, so Rich
is loaded by what prints to a terminal (the CLI, the Django and Flask
commands), never by ``import outbox``, the relay or the metrics collector.
"""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from outbox.broker_health import BrokerState
from outbox.status import OutboxStatus, format_age

__all__ = ["render_status"]


def render_status(status: OutboxStatus, console: Console) -> None:
    """Draw the per-topic table and, when there are parked rows, their errors."""
    table = Table(title=f"rocketbox outbox at {status.generated_at:%Y-%m-%d %H:%M:%S %Z}")
    table.add_column("topic")
    for name in ("pending", "in flight", "oldest pending", "parked", "relayed (1h)"):
        table.add_column(name, justify="right")
    for s in status.topics:
        table.add_row(
            s.topic, str(s.pending), str(s.in_flight), format_age(s.oldest_pending_age),
            f"[red]{s.parked}[/red]" if s.parked else "0",
            "-" if s.relayed_last_hour is None else str(s.relayed_last_hour))
    if not status.topics:
        table.add_row("(no rows)", "0", "0", "-", "0", "-")
    elif len(status.topics) > 1:
        recent = [s.relayed_last_hour for s in status.topics if s.relayed_last_hour is not None]
        table.add_section()
        table.add_row("[b]all[/b]", str(status.pending),
                      str(sum(s.in_flight for s in status.topics)),
                      format_age(status.oldest_pending_age), str(status.parked),
                      str(sum(recent)) if recent else "-")
    console.print(table)
    for u in status.unreachable:
        _render_unreachable(status, u, console)
    if status.errors:
        _render_errors(status, console)
    if status.parked_rows:
        _render_parked(status, console)


def _render_unreachable(status: OutboxStatus, u: BrokerState, console: Console) -> None:
    """The outage line, with the age of its evidence: a relay refreshes it every 30 s."""
    since = format_age((status.generated_at - u.unreachable_since).total_seconds())
    evidence = format_age((status.generated_at - u.updated_at).total_seconds())
    by = f"the relay {u.reported_by}" if u.reported_by else "a relay"
    if status.is_stale(u):
        console.print(Text.assemble(
            ("broker possibly unreachable (stale): ", "bold yellow"),
            f"{u.broker} was reported unreachable by {by} since "
            f"{u.unreachable_since:%Y-%m-%d %H:%M:%S %Z} ({since} ago), but no relay has "
            f"confirmed it for {evidence} (a relay that cannot reach it says so every 30 s, "
            f"and clears it once it does): "
            f"the relay that reported it has stopped or uses another broker now. Last "
            f"error: {u.last_error or '-'}"))
        return
    console.print(Text.assemble(
        ("broker unreachable since ", "bold red"),
        (f"{u.unreachable_since:%Y-%m-%d %H:%M:%S %Z}", "bold red"),
        f" ({since} ago, last confirmed {evidence} ago by {by}): {u.broker}; the relay "
        f"retries with backoff. Last error: {u.last_error or '-'}"))


def _render_errors(status: OutboxStatus, console: Console) -> None:
    """One block per distinct error: rows (pending and parked) and topics, then the text."""
    console.print(f"[b]last errors of unrelayed rows[/b] ({len(status.errors)} distinct, "
                  "most rows first)")
    for e in status.errors:
        parts = [f"{e.pending} pending"] if e.pending else []
        if e.parked:
            parts.append(f"{e.parked} parked")
        console.print(Text.assemble((f"{e.rows} row(s)", "bold"), f" ({', '.join(parts)})  "
                                    f"topics: {', '.join(e.topics)}  newest written "
                                    f"{e.newest:%Y-%m-%d %H:%M:%S}"), overflow="fold")
        console.print(Padding(Text(e.error, style="red"), (0, 0, 0, 4)))


def _render_parked(status: OutboxStatus, console: Console) -> None:
    """One block per parked row: its facts on a line, its last error below at full width.

    An error is a sentence; as a table column squeezed next to a 32-digit
    tx_id it wrapped one word per line at 80 columns.
    """
    console.print(f"[b]parked rows[/b] (newest {len(status.parked_rows)} of {status.parked}; "
                  f"`rocketbox replay` re-queues them)")
    for r in status.parked_rows:
        line = Text.assemble((r.tx_id, "bold"), f"  {r.topic}  attempts={r.attempts}  "
                             f"written {r.created_at:%Y-%m-%d %H:%M:%S}")
        console.print(line, overflow="fold")
        console.print(Padding(Text(r.last_error or "(no error recorded)", style="red"),
                              (0, 0, 0, 4)))
