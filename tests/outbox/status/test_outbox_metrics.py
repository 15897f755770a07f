"""``outbox.metrics``: the series a Prometheus scrape sees."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import create_engine

from outbox import metrics
from tests.outbox.status.outbox_ops_support import (
    OpsDb,
    mark_parked,
    mark_relayed,
    publish_rows,
    set_rows,
)


def _value(name: str, labels: dict[str, str] | None = None,
           registry: CollectorRegistry | None = None) -> float:
    value = (registry or metrics.registry()).get_sample_value(name, labels or {})
    return 0.0 if value is None else value


@pytest.mark.timeout(30)
def test_relay_latency_histogram() -> None:
    count = _value("rocketbox_relay_latency_seconds_count")
    total = _value("rocketbox_relay_latency_seconds_sum")
    le_5 = _value("rocketbox_relay_latency_seconds_bucket", {"le": "5.0"})
    relayed = datetime(2025, 1, 1, 12, 0, 3, tzinfo=UTC)
    metrics.observe_relayed(relayed - timedelta(seconds=2.5), relayed)
    metrics.observe_relayed(datetime(2025, 1, 1, 12, 0, 0), relayed)  # naive means UTC
    assert _value("rocketbox_relay_latency_seconds_count") == count + 2
    assert _value("rocketbox_relay_latency_seconds_sum") == pytest.approx(total + 5.5)
    assert _value("rocketbox_relay_latency_seconds_bucket", {"le": "5.0"}) == le_5 + 2


@pytest.mark.timeout(30)
def test_checkback_and_inbox_counters() -> None:
    commit = _value("rocketbox_checkback_total", {"state": "COMMIT"})
    dupes = _value("rocketbox_inbox_duplicates_total", {"group": "metrics-test"})
    metrics.observe_checkback("commit")
    metrics.observe_checkback("COMMIT")
    metrics.observe_inbox_duplicate("metrics-test")
    assert _value("rocketbox_checkback_total", {"state": "COMMIT"}) == commit + 2
    assert _value("rocketbox_inbox_duplicates_total", {"group": "metrics-test"}) == dupes + 1
    text = generate_latest(metrics.registry()).decode()
    assert "# TYPE rocketbox_checkback_total counter" in text
    assert "# TYPE rocketbox_relay_latency_seconds histogram" in text


@pytest.mark.timeout(30)
def test_observers_never_raise() -> None:
    metrics.observe_relayed("not a datetime", None)  # type: ignore[arg-type]
    metrics.observe_checkback(None)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_outbox_gauges_from_the_status_table(ops_db: OpsDb) -> None:
    ids = publish_rows(ops_db, "orders", 4) + publish_rows(ops_db, "mail", 1)
    set_rows(ops_db, ids[:1], created_at=datetime.now(UTC) - timedelta(minutes=10))
    set_rows(ops_db, ids[1:2], claimed_by="w:1",
             claimed_until=datetime.now(UTC) + timedelta(seconds=30))
    mark_parked(ops_db, ids[2:3])
    mark_relayed(ops_db, ids[3:4], datetime.now(UTC))
    clock = [100.0]
    registry = CollectorRegistry()
    collector = metrics.OutboxCollector(ops_db.engine, cache_seconds=5.0,
                                        clock=lambda: clock[0])
    registry.register(collector)

    def value(name: str, topic: str | None = None) -> float:
        return _value(name, {"topic": topic} if topic else None, registry)

    assert value("rocketbox_outbox_up") == 1
    assert value("rocketbox_outbox_backlog", "orders") == 2
    assert value("rocketbox_outbox_in_flight", "orders") == 1
    assert value("rocketbox_outbox_parked", "orders") == 1
    assert value("rocketbox_outbox_backlog", "mail") == 1
    assert value("rocketbox_outbox_oldest_pending_age_seconds", "orders") >= 600

    mark_relayed(ops_db, ids[:2] + ids[4:], datetime.now(UTC))
    assert value("rocketbox_outbox_backlog", "orders") == 2  # cached for 5 s
    clock[0] += 5.0
    assert value("rocketbox_outbox_backlog", "orders") == 0  # drained, still reported
    assert value("rocketbox_outbox_backlog", "mail") == 0
    assert value("rocketbox_outbox_oldest_pending_age_seconds", "orders") == 0
    assert value("rocketbox_outbox_parked", "orders") == 1
    text = generate_latest(registry).decode()
    assert 'rocketbox_outbox_backlog{topic="mail"} 0.0' in text


@pytest.mark.timeout(30)
def test_an_unreachable_database_reports_down() -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none",
                           connect_args={"connect_timeout": 2})
    registry = CollectorRegistry()
    registry.register(metrics.OutboxCollector(engine))  # registering does not connect
    assert _value("rocketbox_outbox_up", registry=registry) == 0
    assert "rocketbox_outbox_backlog" not in {
        s.name for family in registry.collect() for s in family.samples}
    engine.dispose()


@pytest.mark.timeout(60)
def test_metrics_server_serves_everything(ops_db: OpsDb) -> None:
    publish_rows(ops_db, "orders", 2)
    server = metrics.start_metrics_server(0, "127.0.0.1", engine=ops_db.engine)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics",
                                    timeout=10) as response:
            text = response.read().decode()
        assert metrics.watch_outbox(ops_db.engine) is metrics.watch_outbox(ops_db.engine)
    finally:
        server.shutdown()
        server.server_close()
        metrics.unwatch_outbox()
    assert "rocketbox_outbox_up 1.0" in text
    assert 'rocketbox_outbox_backlog{topic="orders"} 2.0' in text
    assert "rocketbox_relay_latency_seconds_bucket" in text
    assert "rocketbox_outbox_up" not in generate_latest(metrics.registry()).decode()


@pytest.mark.timeout(30)
def test_the_registry_plugs_into_an_applications_registry() -> None:
    app_registry = CollectorRegistry(auto_describe=True)
    app_registry.register(metrics.registry())
    metrics.observe_checkback("ROLLBACK")
    assert app_registry.get_sample_value("rocketbox_checkback_total",
                                         {"state": "ROLLBACK"}) >= 1
