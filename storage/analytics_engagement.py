"""Scroll depth and time on page: Plausible's page metrics, from the engagement events its tracker sends when a
page is hidden or left (site_engagement; storage/clickhouse_schema.py). Per page, each visit counts once: its
deepest scroll of the page and the sum of the time the page was seen in it, as Plausible computes them; the
page's scroll depth is the mean of its visits' deepest, its time on page their mean time."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

from storage.analytics import Filters, where
from storage.clickhouse import AnalyticsStore, Params


class PageEngagement(NamedTuple):
    scroll_depth: int  # percent
    time_on_page: int  # seconds


def applies(filters: Filters) -> bool:
    """Whether the filters leave the engagement of pages defined: an `event` or `goal` term chooses events,
    and engagement events are none of them (their pages' numbers would be those of every visit, or none)."""
    return not any(f.dimension in ("event", "goal") for f in filters.terms())


async def page_engagement(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, filters: Filters,
                          pages: Collection[str]) -> dict[str, PageEngagement]:
    """The engagement of each of `pages` (page keys, as breakdowns by page list them) in the window, under
    the filters (the same terms as the events', on the engagement events' own dimensions and props); a page
    without engagement events is left out."""
    if not pages:
        return {}
    q = Params()
    # The condition's columns are site_events', which site_engagement shares; the table named is where a
    # visit-level filter (entry or exit page) finds the visits.
    # The window's days stated whatever its length: the pages follow the day in the sorting key, and only with
    # the days bound do the listed pages' granules alone get read.
    cond = where(q, store.table("site_events"), site_id, start, end, filters.terms(), days=True)
    rows = await store.query(
        "SELECT page, round(avg(depth)), round(avg(ms) / 1000) FROM (SELECT page, session, max(scroll_depth) AS depth, "
        f"sum(engaged_ms) AS ms FROM {store.table('site_engagement')} FINAL WHERE {cond} "
        f"AND page IN {q.bind(list(pages), 'Array(String)')} AND session != 0 GROUP BY page, session) GROUP BY page",
        q.params)
    return {page: PageEngagement(int(depth), int(seconds)) for page, depth, seconds in rows}
