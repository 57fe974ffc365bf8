"""Many distinct long pages (paths near ingestion's 2048-character limit, as unique query strings make) on one
site: a read that ranks them keeps within the store's memory bound by spilling its grouping to disk, where it
failed at the bound (`MEMORY_LIMIT_EXCEEDED`, a 500 on the dashboard's Top pages) with ~100k such pages at the
default 1 GB. Small scale here: 20,000 pages under a 128 MB bound (which fails without the spill)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storage import analytics_breakdown, analytics_lists, analytics_mirror
from storage import events as events_store
from storage.analytics import Filters
from storage.clickhouse import query_bounds
from storage.events import EventRow
from storage.ids import new_id
from tests.analytics_support import create_site, store_of_its_own
from tests.conftest import connect

PAGES = 20_000


async def test_top_pages_of_many_long_paths_within_the_memory_bound(client, analytics_store, database_url, workspace):
    conn = await connect(database_url)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        rows = [EventRow(new_id("evt"), ws, "live", "pageview", now - timedelta(seconds=i + 1),
                         now - timedelta(seconds=i + 1), site_id=site_id, session_id=f"s{i}", ip_hash=f"v{i}",
                         path=f"/p/{i}/" + "x" * (2040 - len(str(i))), country="US") for i in range(PAGES)]
        await events_store.ensure_partitions(conn, {r.ts for r in rows})
        await events_store.copy_events(conn, rows)
        csv = await analytics_mirror.site_events_csv(conn, site_id)
    finally:
        await conn.close()
    store = store_of_its_own(analytics_store, "long_pages", None)
    await analytics_mirror.write_events(store, csv)
    store.query_settings = query_bounds(2, 128)  # the reads' bound (the insert keeps the run's)
    start = now - timedelta(days=1)
    top, total = await analytics_lists.top(store, site_id, start, now, dim="p", name="pageview", domain=None,
                                           limit=20, filters=Filters())
    assert (len(top), total) == (20, PAGES)
    rows = await analytics_breakdown.breakdown(store, site_id, start, now, prop="page", filters=Filters(), goals=[],
                                               limit=20, offset=0, metrics=("visitors", "pageviews"), domain=None)
    assert len(rows) == 20 and all(r["pageviews"] == 1 for r in rows)
