"""Incremental mode: the second run decodes only new segments and re-checks pending ids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark.audit_job import main as audit_main
from tests.spark.audit_seed import broker_seed, sqlite_engine, status_row, utcnow, write_status

pytestmark = pytest.mark.spark


def _audit(tmp: Path, name: str) -> tuple[int, dict[str, Any]]:
    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{tmp / 's.sqlite'}", "--commitlog",
                       str(tmp / "broker"), "--grace", "30", "--slo", "60", "--state",
                       str(tmp / "state"), "--json", str(tmp / f"{name}.json"), "--quiet"])
    return code, json.loads((tmp / f"{name}.json").read_text())


@pytest.mark.timeout(180)
def test_audit_incremental_reads_new_segments_and_rechecks_pending(
        spark_session: Any, tmp_path: Path) -> None:
    engine = sqlite_engine(tmp_path / "s.sqlite")
    rows: list[dict[str, Any]] = []

    def row(tx: str, body: bytes) -> None:
        rows.append(status_row(tx, "Inc", body, "COMMIT", utcnow(), len(rows) + 1))

    with broker_seed(tmp_path / "broker", segment_size=8192) as seed:
        for i in range(60):
            row(f"OLD{i:03d}", b"{}")
            seed.half(f"OLD{i:03d}", "Inc", b"{}")
            seed.commit(f"OLD{i:03d}")
        row("LATER", b"{}")  # committed in the DB, relayed only after the first run
    write_status(engine, rows)
    rows.clear()
    code, first = _audit(tmp_path, "first")
    assert code == 0
    assert first["counts"]["ok"] == 60 and first["counts"]["pending"] == 1
    segments_before = first["segments"]
    assert first["decoded_segments"] == segments_before > 3

    with broker_seed(tmp_path / "broker", segment_size=8192) as seed:
        seed.half("LATER", "Inc", b"{}")
        seed.commit("LATER")
        for i in range(30):
            rows.append(status_row(f"NEW{i:03d}", "Inc", b"{}", "COMMIT", utcnow(),
                                   1000 + i))
            seed.half(f"NEW{i:03d}", "Inc", b"{}")
            seed.commit(f"NEW{i:03d}")
        # a second commit of an old transaction: outside the window, but touched
        seed.half("OLD005", "Inc", b"{}")
        seed.commit("OLD005", op=False)
    write_status(engine, rows)
    engine.dispose()
    code, second = _audit(tmp_path, "second")
    assert code == 1
    assert second["counts"]["duplicate"] == 1
    assert second["counts"]["ok"] == 30 + 1  # the new ones and LATER
    assert second["counts"]["pending"] == 0
    new_segments = second["segments"] - segments_before
    assert second["decoded_segments"] == new_segments + 1  # plus the previous tail
    assert second["window"]["since_ms"] == first["window"]["as_of_ms"]
