"""Disks filling up (fault walk-through, docs/benchmarks.md "Faults under load"). The analytics store that can
take no insert (its disk full: ClickHouse refuses with NOT_ENOUGH_SPACE) leaves ingestion alone, and an analytics
read, which first brings the store up to date, answers 503 with Retry-After, as behind a backlog, not a 500 with
a traceback per read; once the store takes inserts again the read counts every event."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager

from app.appkeys import MIRROR
from app.outages import MIRROR_BEHIND
from storage.clickhouse import AnalyticsStore
from tests.conftest import bearer
from tests.reports_support import create_report, run_report

NO_ROOM = 1 << 62  # bytes a MergeTree table must find free before it takes an insert: none can


@contextmanager
def store_full(store: AnalyticsStore):
    """The store's keyed table refuses every insert as a full disk does (NOT_ENOUGH_SPACE), until the block ends."""
    table = f"{store.database}.keyed_events"
    store.client.command(f"ALTER TABLE {table} MODIFY SETTING min_free_disk_bytes_to_perform_insert = {NO_ROOM}")
    try:
        yield
    finally:
        store.client.command(f"ALTER TABLE {table} RESET SETTING min_free_disk_bytes_to_perform_insert")


async def test_reads_while_the_analytics_store_cannot_insert_answer_503_then_count_everything(
        make_client, settings, make_key, analytics_store):
    client = await make_client(settings)
    key = await make_key("read,write")
    day = {"from": "2024-04-01T00:00:00Z", "to": "2024-04-02T00:00:00Z"}
    report = await create_report(client, key, {"name": "s", "type": "event_volume",
                                               "config": {"events": ["signup"], **day}})
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "signup"}]})).json()
    chart = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data?from={day['from']}&to={day['to']}"
    event = {"event": "signup", "user_id": "u1", "timestamp": "2024-04-01T10:00:00Z"}
    assert (await client.post("/v1/events", headers=bearer(key), json=event)).status == 200
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 1

    with store_full(analytics_store):
        event["user_id"] = "u2"
        resp = await client.post("/v1/events", headers=bearer(key), json=event)
        assert resp.status == 200  # PostgreSQL is the system of record: ingestion does not need the store
        for url in (f"/v1/reports/{report['id']}/run", chart):
            resp = await asyncio.wait_for(client.get(url, headers=bearer(key)), 20)
            assert resp.status == 503, (url, resp.status, await resp.text())
            assert resp.headers["Retry-After"] == "10"
            assert await resp.json() == {"error": {"code": "unavailable", "message": MIRROR_BEHIND}}

    await client.app[MIRROR].catch_up()
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 2
    resp = await client.get(chart, headers=bearer(key))
    assert resp.status == 200, await resp.text()
