"""A self-contained HTML report: inline SVG charts drawn here, no script, no CDN."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

from spark.classify import CATEGORIES, DIVERGENT
from spark.summary import Summary

__all__ = ["render_html", "write_html"]

_COLORS = {"ok": "#4caf50", "pending": "#9e9e9e", "lost": "#d32f2f", "phantom": "#7b1fa2",
           "duplicate": "#f57c00", "stuck_half": "#5d4037", "discarded": "#455a64",
           "payload_mismatch": "#c2185b", "late": "#fbc02d"}
_W, _H, _PAD = 720, 240, 40


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _bars(items: list[tuple[str, int, str]], *, horizontal: bool = False) -> str:
    """A bar chart of ``(label, value, colour)``."""
    if not items:
        return "<p><em>no data</em></p>"
    top = max(v for _l, v, _c in items) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" '
             f'height="{_H if not horizontal else 24 * len(items) + 10}" role="img">']
    if horizontal:
        for i, (label, value, color) in enumerate(items):
            width = (_W - 260) * value / top
            y = 5 + 24 * i
            parts.append(f'<text x="0" y="{y + 15}" font-size="12">{_esc(label[:32])}</text>'
                         f'<rect x="220" y="{y}" width="{width:.1f}" height="18" '
                         f'fill="{color}"><title>{_esc(label)}: {value}</title></rect>'
                         f'<text x="{224 + width:.1f}" y="{y + 14}" font-size="11">{value}</text>')
    else:
        step = (_W - _PAD) / len(items)
        for i, (label, value, color) in enumerate(items):
            height = (_H - 2 * _PAD) * value / top
            x = _PAD + i * step
            parts.append(f'<rect x="{x + 2:.1f}" y="{_H - _PAD - height:.1f}" '
                         f'width="{step - 4:.1f}" height="{height:.1f}" fill="{color}">'
                         f'<title>{_esc(label)}: {value}</title></rect>'
                         f'<text x="{x + step / 2:.1f}" y="{_H - _PAD + 14}" font-size="10" '
                         f'text-anchor="middle">{_esc(label)}</text>'
                         f'<text x="{x + step / 2:.1f}" y="{_H - _PAD - height - 3:.1f}" '
                         f'font-size="10" text-anchor="middle">{value}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline(summary: Summary) -> str:
    """Stacked bars: tx_ids per time bucket, by category."""
    if not summary.timeline:
        return "<p><em>no data</em></p>"
    starts = sorted({s for s, _c, _n in summary.timeline})
    per: dict[int, dict[str, int]] = {s: {} for s in starts}
    for s, c, n in summary.timeline:
        per[s][c] = n
    top = max(sum(v.values()) for v in per.values()) or 1
    step = (_W - _PAD) / len(starts)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H + 30}" '
             'role="img">']
    for i, s in enumerate(starts):
        y: float = _H - _PAD
        for cat in CATEGORIES:
            n = per[s].get(cat, 0)
            if not n:
                continue
            h = (_H - 2 * _PAD) * n / top
            y -= h
            parts.append(f'<rect x="{_PAD + i * step + 1:.1f}" y="{y:.1f}" '
                         f'width="{max(step - 2, 1):.1f}" height="{h:.1f}" '
                         f'fill="{_COLORS[cat]}"><title>{_ts(s)} {cat}: {n}</title></rect>')
    parts.append(f'<text x="{_PAD}" y="{_H - _PAD + 14}" font-size="10">{_ts(starts[0])}'
                 f'</text><text x="{_W}" y="{_H - _PAD + 14}" font-size="10" '
                 f'text-anchor="end">{_ts(starts[-1] + summary.bucket_ms)} UTC</text>')
    for i, cat in enumerate(CATEGORIES):  # legend
        x = 10 + (i % 5) * 140
        y = _H - 8 + (i // 5) * 16
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                     f'fill="{_COLORS[cat]}"/><text x="{x + 14}" y="{y}" '
                     f'font-size="11">{cat}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(summary: Summary, *, title: str = "rocketbox audit") -> str:
    """The whole report as one HTML string (opens offline)."""
    counts = "".join(
        f'<tr class="{"bad" if c in DIVERGENT and summary.counts.get(c) else ""}">'
        f"<td>{c}</td><td>{summary.counts.get(c, 0)}</td></tr>" for c in CATEGORIES)
    latency = [("+inf" if b < 0 else f"≤{b}", n, "#1976d2") for b, n in summary.latency]
    topics = [(t, n, "#d32f2f") for t, n in summary.top_topics]
    problems = "".join(f"<tr><td>{_esc(s)}</td><td>{o}</td><td>{_esc(r)}</td></tr>"
                       for s, o, r in summary.problems) or '<tr><td colspan="3">none</td></tr>'
    p50 = "n/a" if summary.latency_p50_ms is None else f"{summary.latency_p50_ms:.0f} ms"
    p99 = "n/a" if summary.latency_p99_ms is None else f"{summary.latency_p99_ms:.0f} ms"
    verdict = f"{summary.divergent} divergent tx_id(s)" if summary.divergent else "clean"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; }}
tr.bad td {{ color: #b71c1c; font-weight: bold; }} h2 {{ margin-top: 1.5em; }}
</style></head><body>
<h1>{_esc(title)}: {_esc(verdict)}</h1>
<p>{summary.segments} commit-log segment(s) read; {len(summary.problems)} corrupt stretch(es).</p>
<h2>Categories</h2><table><tr><th>category</th><th>tx_ids</th></tr>{counts}</table>
<h2>Categories over time</h2>{_timeline(summary)}
<h2>Commit-to-visible latency</h2><p>p50 {p50}, p99 {p99}</p>{_bars(latency)}
<h2>Top divergent topics</h2>{_bars(topics, horizontal=True)}
<h2>Corrupt or truncated commit log</h2>
<table><tr><th>segment</th><th>offset</th><th>reason</th></tr>{problems}</table>
</body></html>
"""


def write_html(summary: Summary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(summary), encoding="utf-8")
