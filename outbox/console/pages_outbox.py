"""The outbox's pages: overview, rows (and replay), lookup and trace, audit."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from outbox.console.audit_view import read_audit
from outbox.console.broker_view import message_row
from outbox.console.handlers import confirm_or_run, console_of, parse_input, render
from outbox.console.rows import ROW_STATES, RowFilter, list_rows, one_row
from outbox.console.trace import build_trace
from outbox.replay import replay

__all__ = ["ROUTES"]

_TX_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def overview(request: Request) -> Response:
    return render(request, "overview.html", **_overview_context(request))


def overview_cards(request: Request) -> Response:
    return render(request, "_overview_cards.html", **_overview_context(request))


def _overview_context(request: Request) -> dict[str, Any]:
    console = console_of(request)
    state = console.sampler.state
    return {"sample": console.sampler.latest(), "status": state.status,
            "db_error": state.db_error, "broker_error": state.broker_error,
            "every": console.config.sample_seconds}


def series(request: Request) -> Response:
    return JSONResponse(console_of(request).sampler.series())


def _number(request: Request, name: str, cast: type[float] | type[int]) -> Any:
    text = request.query_params.get(name, "").strip()
    if not text:
        return None
    value = parse_input(name, text, cast, "a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {text!r}")
    return value


def rows(request: Request) -> Response:
    console = console_of(request)
    params = request.query_params
    if console.engine is None:
        return render(request, "rows.html", rows=[], wanted=None, states=ROW_STATES,
                      error="no database: start the console with --db")
    try:
        minutes = _number(request, "older_than_minutes", float)
        wanted = RowFilter(state=params.get("state") or "all", topic=params.get("topic") or None,
                           older_than=minutes * 60 if minutes is not None else None,
                           error=params.get("error") or None,
                           limit=_number(request, "limit", int) or 100)
    except ValueError as exc:
        return render(request, "rows.html", rows=[], wanted=None, states=ROW_STATES,
                      error=str(exc), status_code=400)
    found = list_rows(console.engine, wanted)
    return render(request, "rows.html", rows=found, wanted=wanted, states=ROW_STATES,
                  error=None, params=params)


async def replay_rows(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    ids = [str(v) for v in form.getlist("tx_id") if str(v).strip()]

    def run(form: FormData) -> str:
        if console.engine is None:
            raise ValueError("no database: start the console with --db")
        result = replay(console.engine, [str(v) for v in form.getlist("tx_id")])
        parts = [f"{len(result.replayed)} replayed"]
        for name in ("not_parked", "already_relayed", "unknown"):
            skipped = getattr(result, name)
            if skipped:
                parts.append(f"{name.replace('_', ' ')}: {', '.join(skipped)}")
        return "; ".join(parts)

    if not ids:
        return RedirectResponse("/rows?state=parked&problem=select+rows+to+replay",
                                status_code=303)
    return await confirm_or_run(
        request, what=f"replay {len(ids)} parked row(s) ({', '.join(ids[:5])}"
                      f"{', ...' if len(ids) > 5 else ''})",
        run=run, back="/rows?state=parked")


def trace(request: Request) -> Response:
    console = console_of(request)
    tx_id = request.path_params["tx_id"]
    found = build_trace(console.engine, console.admin, tx_id, inbox_dbs=console.inbox_engines)
    view = request.query_params.get("body") or ("json" if "json" in found.body else "text")
    return render(request, "trace.html", trace=found, view=view,
                  status_code=200 if found.found else 404)


def lookup(request: Request) -> Response:
    """By tx_id (the outbox row), message id or key (the broker's key index)."""
    console = console_of(request)
    query = (request.query_params.get("q") or "").strip()
    if not query:
        return render(request, "lookup.html", query="", messages=[], error=None)
    if not _TX_ID.fullmatch(query) and " " in query:
        return render(request, "lookup.html", query=query, messages=[],
                      error="a key has no spaces", status_code=400)
    if console.engine is not None and one_row(console.engine, query) is not None:
        return RedirectResponse(f"/trace/{query}", status_code=303)
    try:
        found = console.admin().query_by_key(query, 64)
    except Exception as exc:
        return render(request, "lookup.html", query=query, messages=[],
                      error=f"broker: {exc}", status_code=502)
    messages = [message_row(msg) for msg in found]
    return render(request, "lookup.html", query=query, messages=messages, error=None)


def audit(request: Request) -> Response:
    config = console_of(request).config
    report = read_audit(config.audit_json, config.audit_out)
    return render(request, "audit.html", report=report,
                  counts_json=json.dumps(report.counts, indent=2) if report.counts else "",
                  has_html=config.audit_html is not None and config.audit_html.is_file())


def audit_html(request: Request) -> Response:
    config = console_of(request).config
    if config.audit_html is None or not config.audit_html.is_file():
        return Response("no HTML audit report (start the console with --audit-html)",
                        status_code=404, media_type="text/plain")
    return Response(config.audit_html.read_bytes(), media_type="text/html")


ROUTES = [
    Route("/", overview),
    Route("/overview/cards", overview_cards),
    Route("/api/series", series),
    Route("/rows", rows),
    Route("/rows/replay", replay_rows, methods=["POST"]),
    Route("/trace/{tx_id}", trace),
    Route("/lookup", lookup),
    Route("/audit", audit),
    Route("/audit/report.html", audit_html),
]
