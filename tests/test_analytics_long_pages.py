"""Many distinct long pages (paths near ingestion's 2048-character limit, as unique query strings make) on one
site: a read that ranks them keeps within the store's memory bound by spilling its grouping to disk, where it
failed at the bound (`MEMORY_LIMIT_EXCEEDED`, a 500 on the dashboard's Top pages) with ~100k such pages at the
default 1 GB. Small scale here: 20,000 pages under a 128 MB bound (which fails without the spill). The overview
ranks the same pages beside its other lists and its series in one query, which must not hold them all either."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storage import analytics_breakdown, analytics_lists, analytics_mirror, analytics_overview
from storage import events as events_store
from storage.analytics import Filters
from storage.clickhouse import AnalyticsStore, query_bounds
from storage.events import EventRow
from storage.ids import new_id
from tests.analytics_support import create_site, store_of_its_own
from tests.conftest import connect

PAGES = 20_000


async def long_pages_site(analytics_store: AnalyticsStore, database_url: str, workspace: str,
                          name: str) -> tuple[AnalyticsStore, str, datetime]:
    """(store, site id, now): a site's PAGES pageviews of the last PAGES seconds, each on a page of its own near
    2048 characters, every other one from news.example, mirrored into a store of its own."""
    conn = await connect(database_url)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        rows = [EventRow(new_id("evt"), ws, "live", "pageview", now - timedelta(seconds=i + 1),
                         now - timedelta(seconds=i + 1), site_id=site_id, session_id=f"s{i}", ip_hash=f"v{i}",
                         path=f"/p/{i}/" + "x" * (2040 - len(str(i))), country="US",
                         referrer="https://news.example/" if i % 2 else None) for i in range(PAGES)]
        await events_store.ensure_partitions(conn, {r.ts for r in rows})
        await events_store.copy_events(conn, rows)
        csv = await analytics_mirror.site_events_csv(conn, site_id)
    finally:
        await conn.close()
    store = store_of_its_own(analytics_store, name, None)
    await analytics_mirror.write_events(store, csv)
    return store, site_id, now


async def test_top_pages_of_many_long_paths_within_the_memory_bound(client, analytics_store, database_url, workspace):
    store, site_id, now = await long_pages_site(analytics_store, database_url, workspace, "long_pages")
    store.query_settings = query_bounds(2, 128)  # the reads' bound (the insert keeps the run's)
    start = now - timedelta(days=1)
    top, total = await analytics_lists.top(store, site_id, start, now, dim="p", name="pageview", domain=None,
                                           limit=20, filters=Filters())
    assert (len(top), total) == (20, PAGES)
    rows = await analytics_breakdown.breakdown(store, site_id, start, now, prop="page", filters=Filters(), goals=[],
                                               limit=20, offset=0, metrics=("visitors", "pageviews"), domain=None)
    assert len(rows) == 20 and all(r["pageviews"] == 1 for r in rows)


async def test_the_overview_of_many_long_paths_within_the_memory_bound(client, analytics_store, database_url,
                                                                      workspace):
    """The overview's three top lists rank the pages in the same query as the series; its totals per list were
    a window over every grouped page, which the store keeps in memory whole (a window does not spill)."""
    store, site_id, now = await long_pages_site(analytics_store, database_url, workspace, "long_pages_overview")
    store.query_settings = query_bounds(2, 144)  # the old query failed up to 160 MB here, this one from 128 on
    start = now - timedelta(days=1)
    _, _, tops, _ = await analytics_overview.overview(store, site_id, start, now, name="pageview", interval="hour",
                                                      first=start, last=now, domain=None, limit=10,
                                                      filters=Filters())
    pages, total = tops["p"]
    assert (len(pages), total) == (10, PAGES)
    assert pages == sorted(pages, key=lambda p: p[0]) and all(c == 1 for _, c in pages)  # ties: by page
    assert tops["c"] == ([("US", PAGES)], PAGES)
    assert tops["r"] == ([("news.example", PAGES // 2)], PAGES // 2)
