"""bench/grpc_door.py's README section: the cases, the gRPC floor and the official client.

:func:`render` turns a run (bench/results/grpc.json) into the ``grpc``
section of bench/README.md, which a run also prints.
"""

from __future__ import annotations

from typing import Any

from _common import machine_summary

__all__ = ["LABELS", "render"]

LABELS = {"send": "send (msgs/s)", "tx": "transaction: half + commit (tx/s)",
          "consume": "consume + ack (msgs/s)"}


def _code_text(code: dict[str, Any]) -> str:
    commit = (code.get("commit") or "?")[:12]
    if code.get("source") == "commit":
        return f"as committed at `{commit}` (--at-commit)"
    dirty = code.get("dirty_paths") or []
    return f"in the working tree at `{commit}`" + (
        f", with uncommitted paths: {', '.join(dirty[:6])}" if dirty else "")


def render(data: dict[str, Any]) -> str:
    lines = [
        f"Last full run: {data['finished']}, {data['repeat']} repetitions (medians), "
        f"{data['concurrency']} requests in flight, 128 B bodies, `--flush async`.",
        f"Code measured: broker_lite {_code_text(data['git'])}.",
        f"Machine: {machine_summary(data['machine'])}; load average "
        f"{data['load_start'][0] if data['load_start'] else '?'} at start, "
        f"{data['load_end'][0] if data['load_end'] else '?'} at end (1 min).",
        "",
        "| case | count | native door | gRPC door | gRPC / native | ratio range |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in data["cases"]:
        low, high = result["ratio_range"]
        lines.append(
            f"| {LABELS[result['case']]} | {result['count']:,} | "
            f"{result['native_median']:,.0f} | {result['grpc_median']:,.0f} | "
            f"{result['ratio_median']:.2f} | {low:.2f}-{high:.2f} |")
    for result in data["cases"]:
        if "floor_median" in result:
            lines += ["", f"gRPC floor: the same gRPC send load against a `grpc.aio` servicer "
                          f"that answers at once and stores nothing: "
                          f"{result['floor_median']:,.0f} msgs/s; the door reaches "
                          f"**{result['floor_ratio_median']:.2f}** of it."]
    official = data.get("official")
    if official:
        rates = ", ".join(f"W={w}: {r:,.0f}" for w, r in official["rates"].items())
        native_send = next((c["native_median"] for c in data["cases"] if c["case"] == "send"),
                           None)
        versus = (f"; {official['best_rate'] / native_send:.2f} x the native send above"
                  if native_send else "")
        lines += ["", f"Official `rocketmq-python-client` Producer (`send_async`, W sends in "
                      f"flight, {official['count']:,} messages each): {rates} msgs/s. Best: "
                      f"**{official['best_rate']:,.0f} msgs/s at W={official['best_window']}**"
                      f"{versus}."]
    return "\n".join(lines)
