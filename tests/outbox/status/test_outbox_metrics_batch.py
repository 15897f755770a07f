"""``outbox.metrics.observe_relayed_many``: a relay pass's latencies, the same series as
one ``observe_relayed`` per row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox import metrics

NAME = "rocketbox_relay_latency_seconds"
RELAYED = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
#: ages that land on bucket bounds (0.005 s goes in le=0.005), between them, past the last
#: finite bound (+Inf), and one in the future (counted as 0 s); naive means UTC
AGES = [0.0, 0.005, 0.0051, 0.01, 0.3, 0.3, 2.5, 59.9, 900.0, 3600.0, 3600.5, 7200.0, -4.0]


def _snapshot() -> dict[str, float]:
    registry = metrics.registry()
    out = {}
    for family in registry.collect():
        if family.name != NAME:
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[sample.name + repr(sorted(sample.labels.items()))] = sample.value
    assert out, "the histogram has no samples"
    return out


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in after}


def _created() -> list[datetime]:
    out = [RELAYED - timedelta(seconds=age) for age in AGES]
    out[3] = out[3].replace(tzinfo=None)  # SQLite hands back naive datetimes
    return out


@pytest.mark.timeout(30)
def test_a_pass_observed_at_once_moves_every_series_as_one_observe_per_row() -> None:
    before = _snapshot()
    for created in _created():
        metrics.observe_relayed(created, RELAYED)
    one_each = _delta(before, _snapshot())

    before = _snapshot()
    metrics.observe_relayed_many(_created(), RELAYED)
    at_once = _delta(before, _snapshot())

    assert at_once.keys() == one_each.keys()
    for key, value in one_each.items():
        assert at_once[key] == pytest.approx(value), key
    assert at_once[f"{NAME}_count[]"] == len(AGES)
    # the bound is inclusive: 0.0 and 0.005 in le=0.005, 0.0051 not; the future row too
    assert at_once[f"{NAME}_bucket[('le', '0.005')]"] == 3
    assert at_once[f"{NAME}_bucket[('le', '+Inf')]"] == len(AGES)


@pytest.mark.timeout(30)
def test_nothing_to_observe_and_bad_values_never_raise() -> None:
    before = _snapshot()
    metrics.observe_relayed_many([], RELAYED)
    metrics.observe_relayed_many(["not a datetime"], RELAYED)  # type: ignore[list-item]
    assert _delta(before, _snapshot()) == dict.fromkeys(before, 0.0)


@pytest.mark.timeout(30)
def test_a_histogram_without_the_known_insides_gets_one_observe_per_value() -> None:
    class Plain:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, value: float) -> None:
            self.seen.append(value)

    plain = Plain()
    metrics._observe_all(plain, [0.5, 0.0, 3.0])
    assert plain.seen == [0.5, 0.0, 3.0]
