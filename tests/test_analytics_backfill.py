"""A backfill's events may span any number of months, and the analytics store partitions its tables by month.
ClickHouse refuses an insert block spanning more than 100 partitions by default, so one batch of history (a
`/v1/events/batch` of 10 years, monthly) failed the mirror round that carried it, and every round after it: the
store stayed behind for good and every analytics read answered 503."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.conftest import bearer
from tests.reports_support import create_report, run_report

MONTHS = 130


def month(i: int) -> str:
    return datetime(2012 + i // 12, 1 + i % 12, 15, 12, tzinfo=UTC).isoformat()


async def test_a_batch_spanning_more_than_100_months_reaches_the_reports(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "invoice_paid", "user_id": f"u{i % 7}", "timestamp": month(i)} for i in range(MONTHS)]})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["received"] == MONTHS
    report = await create_report(client, key, {"name": "history", "type": "event_volume", "config": {
        "events": ["invoice_paid"], "from": "2012-01-01T00:00:00Z", "to": "2023-12-31T00:00:00Z",
        "interval": "week"}})

    body = await run_report(client, key, report["id"])

    assert sum(row[-1] for row in body["rows"]) == MONTHS


async def test_large_events_past_the_memory_bound_in_one_round_reach_the_reports(client, make_key, analytics_store):
    """A mirror round inserted its whole batch in one statement, whatever its size: 20,000 events (a round) of
    64 KB each (an event's limit) are 1.3 GB, past the default 1 GiB bound. Here the bound is 64 MB (the setting's
    floor) and the events 100 MB: the round failed, and every round after it."""
    key = await make_key("read,write")
    payload = "x" * 60_000
    batches, per_batch = 13, 130  # 8 MB bodies
    saved = analytics_store.query_settings["max_memory_usage"]
    analytics_store.query_settings["max_memory_usage"] = 64 * 1024 * 1024
    try:
        for _ in range(batches):
            resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
                {"event": "upload", "user_id": f"u{i}", "timestamp": "2024-04-01T10:00:00Z",
                 "properties": {"blob": payload}} for i in range(per_batch)]})
            assert resp.status == 200 and (await resp.json())["received"] == per_batch, await resp.text()
        report = await create_report(client, key, {"name": "uploads", "type": "event_volume", "config": {
            "events": ["upload"], "from": "2024-04-01T00:00:00Z", "to": "2024-04-02T00:00:00Z"}})
        body = await run_report(client, key, report["id"])
    finally:
        analytics_store.query_settings["max_memory_usage"] = saved
    assert sum(row[-1] for row in body["rows"]) == batches * per_batch
