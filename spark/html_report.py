"""A self-contained HTML report: inline SVG charts drawn here, no script, no CDN.

Every chart has labelled axes with units. The latency histogram's buckets are
equal on a log10 axis (:data:`spark.summary.LATENCY_PER_DECADE` per decade),
so equal widths stand for equal ratios; every bucket between the fastest
commit and the slowest (or the SLO) is drawn, empty ones too, and the SLO is a
line on it. The rules the run used and the first divergent tx_ids are listed,
with a link to the Parquet output that holds all of them.
"""

from __future__ import annotations

import html
import math
import os
from datetime import UTC, datetime
from pathlib import Path

from spark.categories import ACTIONS, CATEGORIES, DIVERGENT
from spark.summary import LATENCY_PER_DECADE, Summary

__all__ = ["render_html", "write_html"]

_COLORS = {"ok": "#4caf50", "pending": "#9e9e9e", "lost": "#d32f2f", "phantom": "#7b1fa2",
           "duplicate": "#f57c00", "stuck_half": "#5d4037", "discarded": "#455a64",
           "payload_mismatch": "#c2185b", "late": "#fbc02d", "parked": "#0097a7",
           "undelivered": "#ff7043"}
_W, _H = 720, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 20, 24, 56  # plot margins (room for the axes' labels)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _sig(value: float) -> str:
    """Two significant digits, no exponent: 1.6, 25, 160."""
    return f"{float(f'{value:.2g}'):g}"


def _duration(ms: float) -> str:
    """``1.6 ms``, ``250 ms``, ``5 s``, ``16 min``: a readable unit for a duration."""
    if ms < 1000:
        return f"{_sig(ms)} ms"
    if ms < 120_000:
        return f"{_sig(ms / 1000)} s"
    if ms < 7_200_000:
        return f"{_sig(ms / 60_000)} min"
    return f"{_sig(ms / 3_600_000)} h"


def _ticks(top: int) -> list[int]:
    """0 and round steps (1, 2 or 5 x 10^k) up to at least ``top``: at most 6 ticks."""
    top = max(top, 1)
    steps = (m * 10**k for k in range(19) for m in (1, 2, 5))
    step = next(s for s in steps if top / s <= 5)
    return list(range(0, -(-top // step) * step + 1, step))


def _y_axis(top: int, title: str) -> tuple[list[str], float]:
    """The y axis's ticks, grid and title; returns them and the value drawn at the top."""
    ticks = _ticks(top)
    high = ticks[-1] or 1
    plot_h = _H - _TOP - _BOTTOM
    parts = [f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_H - _BOTTOM}" stroke="#333"/>']
    for value in ticks:
        y = _H - _BOTTOM - plot_h * value / high
        parts.append(f'<line x1="{_LEFT - 4}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" '
                     f'stroke="#ddd"/><text x="{_LEFT - 6}" y="{y + 4:.1f}" font-size="10" '
                     f'text-anchor="end">{value}</text>')
    parts.append(f'<text class="axis-label" x="14" y="{_TOP + plot_h / 2:.1f}" font-size="11" '
                 f'text-anchor="middle" transform="rotate(-90 14 {_TOP + plot_h / 2:.1f})">'
                 f"{_esc(title)}</text>")
    return parts, high


def _x_title(title: str) -> str:
    return (f'<text class="axis-label" x="{(_LEFT + _W - _RIGHT) / 2:.1f}" y="{_H - 8}" '
            f'font-size="11" text-anchor="middle">{_esc(title)}</text>')


def _svg(height: int, parts: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
            f'role="img" aria-label="{_esc(label)}">{"".join(parts)}</svg>')


def _latency(summary: Summary) -> str:
    """The commit-to-visible histogram on a log axis, every bucket drawn, the SLO marked."""
    buckets = summary.latency
    if not buckets:
        return "<p><em>no visible commit to measure</em></p>"
    first = -1 if buckets[0].from_ms is None else round(
        math.log10(buckets[0].from_ms) * LATENCY_PER_DECADE)
    width = (_W - _LEFT - _RIGHT) / len(buckets)
    parts, high = _y_axis(max(b.count for b in buckets), "transactions per bucket")
    plot_h = _H - _TOP - _BOTTOM

    def x_of(ms: float) -> float:  # a latency's place on the log axis
        return _LEFT + (math.log10(ms) * LATENCY_PER_DECADE - first) * width

    for i, b in enumerate(buckets):
        h = plot_h * b.count / high
        span = (f"< {_duration(b.to_ms)}" if b.from_ms is None
                else f"{_duration(b.from_ms)} to {_duration(b.to_ms)}")
        parts.append(f'<rect class="bucket" x="{_LEFT + i * width + 1:.1f}" '
                     f'y="{_H - _BOTTOM - h:.1f}" width="{max(width - 2, 1):.1f}" '
                     f'height="{h:.1f}" fill="#1976d2"><title>{_esc(span)}: {b.count} '
                     f"transaction(s)</title></rect>")
    parts.append(f'<line x1="{_LEFT}" y1="{_H - _BOTTOM}" x2="{_W - _RIGHT}" '
                 f'y2="{_H - _BOTTOM}" stroke="#333"/>')
    low_decade = max(0, math.ceil(first / LATENCY_PER_DECADE))
    high_decade = (first + len(buckets)) // LATENCY_PER_DECADE
    for decade in range(low_decade, high_decade + 1):
        x = x_of(10.0 ** decade)
        parts.append(f'<line x1="{x:.1f}" y1="{_H - _BOTTOM}" x2="{x:.1f}" '
                     f'y2="{_H - _BOTTOM + 5}" stroke="#333"/><text class="tick" x="{x:.1f}" '
                     f'y="{_H - _BOTTOM + 17}" font-size="10" text-anchor="middle">'
                     f"{_esc(_duration(10.0 ** decade))}</text>")
    if buckets[0].from_ms is None:
        parts.append(f'<text class="tick" x="{_LEFT + width / 2:.1f}" y="{_H - _BOTTOM + 29}" '
                     f'font-size="10" text-anchor="middle">&lt;1 ms</text>')
    if summary.window is not None and summary.window.slo_ms >= 1:
        x = x_of(summary.window.slo_ms)
        parts.append(f'<line class="slo" x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" '
                     f'y2="{_H - _BOTTOM}" stroke="#d32f2f" stroke-dasharray="5,3"/>'
                     f'<text x="{x + 4:.1f}" y="{_TOP + 4}" font-size="11" fill="#d32f2f">'
                     f"SLO {_esc(_duration(summary.window.slo_ms))}</text>")
    parts.append(_x_title(f"commit-to-visible latency (log scale, {LATENCY_PER_DECADE} "
                          "buckets per decade)"))
    return _svg(_H, parts, "commit-to-visible latency histogram")


def _topics(summary: Summary) -> str:
    """Horizontal bars: divergent tx_ids per topic."""
    items = summary.top_topics
    if not items:
        return "<p><em>no divergent tx_id</em></p>"
    top = max(n for _t, n in items) or 1
    plot_w = _W - 260
    height = 24 * len(items) + 44
    parts = []
    for i, (label, value) in enumerate(items):
        width = plot_w * value / top
        y = 5 + 24 * i
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{_esc(label[:32])}</text>'
                     f'<rect x="220" y="{y}" width="{width:.1f}" height="18" '
                     f'fill="#d32f2f"><title>{_esc(label)}: {value}</title></rect>'
                     f'<text x="{224 + width:.1f}" y="{y + 14}" font-size="11">{value}</text>')
    base = 24 * len(items) + 8
    parts.append(f'<line x1="220" y1="{base}" x2="{220 + plot_w}" y2="{base}" stroke="#333"/>'
                 f'<text x="220" y="{base + 14}" font-size="10">0</text>'
                 f'<text x="{220 + plot_w}" y="{base + 14}" font-size="10" '
                 f'text-anchor="end">{top}</text>'
                 f'<text class="axis-label" x="{220 + plot_w / 2:.0f}" y="{base + 30}" '
                 f'font-size="11" text-anchor="middle">divergent tx_ids per topic</text>')
    return _svg(height, parts, "top divergent topics")


def _timeline(summary: Summary) -> str:
    """Stacked bars: tx_ids per time bucket, by category."""
    if not summary.timeline:
        return "<p><em>no data</em></p>"
    starts = sorted({s for s, _c, _n in summary.timeline})
    first, n_buckets = starts[0], (starts[-1] - starts[0]) // summary.bucket_ms + 1
    per: dict[int, dict[str, int]] = {s: {} for s in starts}
    for s, c, n in summary.timeline:
        per[s][c] = n
    parts, high = _y_axis(max(sum(v.values()) for v in per.values()),
                          f"tx_ids per {_duration(summary.bucket_ms)}")
    plot_h = _H - _TOP - _BOTTOM
    step = (_W - _LEFT - _RIGHT) / n_buckets
    for s in starts:
        i = (s - first) // summary.bucket_ms
        y: float = _H - _BOTTOM
        for cat in CATEGORIES:
            n = per[s].get(cat, 0)
            if not n:
                continue
            h = plot_h * n / high
            y -= h
            parts.append(f'<rect x="{_LEFT + i * step + 1:.1f}" y="{y:.1f}" '
                         f'width="{max(step - 2, 1):.1f}" height="{h:.1f}" '
                         f'fill="{_COLORS[cat]}"><title>{_ts(s)} {cat}: {n}</title></rect>')
    end = first + n_buckets * summary.bucket_ms
    parts.append(f'<text class="tick" x="{_LEFT}" y="{_H - _BOTTOM + 14}" font-size="10">'
                 f'{_ts(first)}</text><text class="tick" x="{_W - _RIGHT}" '
                 f'y="{_H - _BOTTOM + 14}" font-size="10" text-anchor="end">{_ts(end)}</text>')
    parts.append(_x_title("time (UTC) of the DB commit, else of the first broker record"))
    legend = []
    for i, cat in enumerate(CATEGORIES):
        x, y = 10 + (i % 5) * 140, _H + 14 + (i // 5) * 16
        legend.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                      f'fill="{_COLORS[cat]}"/><text x="{x + 14}" y="{y}" '
                      f'font-size="11">{cat}</text>')
    return _svg(_H + 56, parts + legend, "categories over time")


def _rules(summary: Summary) -> str:
    w = summary.window
    if w is None:
        return ""
    rows = [("as of (the audit's now)", f"{_ts(w.now_ms)} UTC"),
            ("window", f"{_ts(w.since_ms) + ' UTC' if w.since_ms is not None else 'start'} to "
                       f"{_ts(w.until_ms) + ' UTC' if w.until_ms is not None else 'now'}"),
            ("grace (--grace)", f"{w.grace_ms / 1000:g} s"),
            ("SLO (--slo)", f"{w.slo_ms / 1000:g} s"),
            ("stuck after (--stuck-after)", f"{w.stuck_ms / 1000:g} s")]
    body = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f'<h2>Rules used</h2><table id="rules">{body}</table>'


def _ids(summary: Summary, base: Path | None) -> str:
    """The first divergent tx_ids, and where the rest are."""
    total = summary.divergent
    if not total:
        return "<p>none</p>"
    if summary.out is None:
        where = "Run with <code>--out DIR</code> to write every divergent row as Parquet."
    else:
        href = summary.out if base is None else os.path.relpath(summary.out, base)
        where = (f'All of them, with their evidence: <a id="parquet" href="{_esc(href)}">'
                 f"{_esc(summary.out)}</a> (Parquet).")
    rows = "".join(f"<tr><td><code>{_esc(tx)}</code></td><td>{_esc(c)}</td><td>{_esc(t)}</td>"
                   f"<td>{_esc(d)}</td></tr>" for tx, c, t, d in summary.divergent_ids)
    return (f"<p>The first {len(summary.divergent_ids)} of {total}. {where}</p>"
            '<table id="divergent-ids"><tr><th>tx_id</th><th>category</th><th>topic</th>'
            f"<th>detail</th></tr>{rows}</table>")


def render_html(summary: Summary, *, title: str = "rocketbox audit",
                base: Path | None = None) -> str:
    """The whole report as one HTML string (opens offline); links are relative to ``base``."""
    counts = "".join(
        f'<tr class="{"bad" if c in DIVERGENT and summary.counts.get(c) else ""}">'
        f"<td>{c}</td><td>{summary.counts.get(c, 0)}</td>"
        f"<td>{_esc(ACTIONS[c]) if c in DIVERGENT and summary.counts.get(c) else ''}</td></tr>"
        for c in CATEGORIES)
    problems = "".join(f"<tr><td>{_esc(s)}</td><td>{o}</td><td>{_esc(r)}</td></tr>"
                       for s, o, r in summary.problems) or '<tr><td colspan="3">none</td></tr>'
    p50 = "n/a" if summary.latency_p50_ms is None else _duration(summary.latency_p50_ms)
    p99 = "n/a" if summary.latency_p99_ms is None else _duration(summary.latency_p99_ms)
    verdict = f"{summary.divergent} divergent tx_id(s)" if summary.divergent else "clean"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 2px 8px; }}
tr.bad td {{ color: #b71c1c; font-weight: bold; }} h2 {{ margin-top: 1.5em; }}
</style></head><body>
<h1>{_esc(title)}: {_esc(verdict)}</h1>
<p>{_esc(_read(summary))}</p>
{_rules(summary)}
<h2>Categories</h2><table><tr><th>category</th><th>tx_ids</th><th>what to do</th></tr>
{counts}</table>
<h2>Divergent tx_ids</h2>{_ids(summary, base)}
<h2>Categories over time</h2>{_timeline(summary)}
<h2>Commit-to-visible latency</h2><p>p50 {p50}, p99 {p99}.</p>{_latency(summary)}
<h2>Top divergent topics</h2>{_topics(summary)}
<h2>Corrupt or truncated commit log</h2>
<table><tr><th>segment</th><th>offset</th><th>reason</th></tr>{problems}</table>
</body></html>
"""


def _read(summary: Summary) -> str:
    """What the run read on the broker's side, in words."""
    export = summary.extra.get("broker_export")
    if export:
        return (f"broker export read: {export['files']} file(s), {export['messages']} "
                f"message(s).")
    return (f"{summary.segments} commit-log segment(s) read; {len(summary.problems)} corrupt "
            f"stretch(es).")


def write_html(summary: Summary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(summary, base=path.resolve().parent), encoding="utf-8")
