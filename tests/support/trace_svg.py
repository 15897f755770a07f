"""Draw finished OpenTelemetry spans as an SVG timeline (docs/tracing.svg comes from here).

One row per span, grouped by trace and indented under its parent; the bar
spans its start and end on a shared time axis; a dashed arrow goes from each
span to every span it links to. ``tests/integrations/fastapi/test_fastapi_tracing.py``
calls :func:`render` with its in-memory exporter's spans when
``ROCKETBOX_TRACE_SVG`` names a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["render"]

ROW, LEFT, WIDTH, TOP = 26, 250, 560, 46
COLOURS = ("#3b6ea8", "#d9822b", "#4f9a52", "#8e5ea2")


def _order(spans: Sequence[Any]) -> list[tuple[Any, int]]:
    """(span, depth) in tree order, traces by their first start, children by start."""
    ids = {s.context.span_id for s in spans}
    children: dict[int | None, list[Any]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    out: list[tuple[Any, int]] = []

    def walk(span: Any, depth: int) -> None:
        out.append((span, depth))
        for child in sorted(children.get(span.context.span_id, []), key=lambda c: c.start_time):
            walk(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda r: r.start_time):
        walk(root, 0)
    return out


def render(spans: Sequence[Any], title: str = "one request, one trace") -> str:
    rows = _order(spans)
    start = min(s.start_time for s in spans)
    end = max(s.end_time for s in spans)
    scale = WIDTH / max(1, end - start)
    traces = list(dict.fromkeys(s.context.trace_id for s, _ in rows))
    y_of = {s.context.span_id: TOP + i * ROW for i, (s, _) in enumerate(rows)}
    x0 = {s.context.span_id: LEFT + (s.start_time - start) * scale for s, _ in rows}
    height = TOP + len(rows) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 30}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="{LEFT}" y="36" fill="#555">0 ms</text>',
           f'<text x="{LEFT + WIDTH}" y="36" fill="#555" text-anchor="end">'
           f'{(end - start) / 1e6:.0f} ms</text>']
    for span, depth in rows:
        sid = span.context.span_id
        y = y_of[sid]
        colour = COLOURS[traces.index(span.context.trace_id) % len(COLOURS)]
        width = max(2.0, (span.end_time - span.start_time) * scale)
        kind = span.kind.name.lower()
        out.append(f'<text x="{10 + depth * 14}" y="{y + 15}">{escape(span.name)}'
                   f' <tspan fill="#888">{kind}</tspan></text>')
        out.append(f'<rect x="{x0[sid]:.1f}" y="{y + 4}" width="{width:.1f}" height="14" '
                   f'rx="2" fill="{colour}"/>')
    for span, _depth in rows:
        for link in span.links:
            target = link.context.span_id
            if target not in y_of:
                continue
            x1, y1 = x0[span.context.span_id], y_of[span.context.span_id] + 11
            x2, y2 = x0[target], y_of[target] + 11
            out.append(f'<path d="M{x1:.1f},{y1} C{x1 - 60:.1f},{y1} {x2 - 60:.1f},{y2} '
                       f'{x2 - 2:.1f},{y2}" fill="none" stroke="#555" stroke-dasharray="4 3" '
                       f'marker-end="url(#arrow)"/>')
    legend = height - 16
    for i, trace_id in enumerate(traces):
        out.append(f'<rect x="{10 + i * 260}" y="{legend - 10}" width="12" height="12" '
                   f'fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{28 + i * 260}" y="{legend}">trace {trace_id:032x}'[:46]
                   + '…</text>')
    out.append(f'<text x="{LEFT + WIDTH}" y="{legend}" text-anchor="end" fill="#555">'
               'dashed: span link</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
