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
