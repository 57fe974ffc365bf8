"""Time series and top lists of the site analytics API on the analytics store, under the filters of
storage/analytics.py (whose rules on FINAL and bound parameters hold here too), the event log's count, and the
keys of the events a filtered export lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from storage import analytics_days
from storage.analytics import SHORT_WINDOW, TS, Filters, bucket, own_referrer, term, where
from storage.clickhouse import AnalyticsStore, Params
from storage.site_filters import Filter

_TOP_KEY = {"p": "page", "r": "referrer_host", "c": "country"}  # storage.analytics.TOP_DIMENSIONS' columns


# --- time series ------------------------------------------------------------------------------------

STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


async def series(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, name: str,
                 interval: str, first: datetime, last: datetime, filters: Filters,
                 time_zone: str = "UTC") -> list[tuple[datetime, int]]:
    """Counts of `name` per bucket of the site's time zone from first to last, zero buckets included. The
    ended days' counts come from their day rows (storage/analytics_days.py) when they hold the series:
    unfiltered by day or hour in windows longer than a week (at 10M events the 30-day series 37-40 -> 20-22
    ms; in a zone of whole hours from the UTC hours' rows, analytics_days.series_rows), and, in UTC, daily
    filtered on the page alone, as sums of the per-page rows (exact for any page term). A few thousand rows
    instead of every event of those days."""
    q, table = Params(), store.table("site_events")
    others = filters.without_name().terms()
    cond = where(q, table, site_id, start, end, [*others, Filter("event", "==", name)])
    by_page = interval == "day" and time_zone == "UTC" and others and all(  # the per-page rows are UTC days
        isinstance(f, Filter) and f.dimension == "page" and f.prop_key is None for f in others)
    # Unfiltered over a week or less, reading the events costs less than looking up the counted days (7 days
    # by the hour at 10M events: 18 ms from the events, 24 through the day rows).
    from_rows = interval in analytics_days.SERIES_ROWS and (by_page or (not others and end - start > SHORT_WINDOW))
    days = await analytics_days.counted_days(store, site_id, start, end) if from_rows else analytics_days.NONE
    listed, dim, day_bucket = analytics_days.series_rows(q, days, interval, time_zone, start, end)
    counted = ""
    if listed:
        day_rows = analytics_days.counts_of(q, store, site_id, days, listed)
        if by_page:
            pages = " AND ".join(term(q, "key", f, True) for f in others)
            counted = (f" UNION ALL SELECT toUnixTimestamp(toDateTime(day, 'UTC')), c FROM {day_rows} "
                       f"WHERE dim = {analytics_days.PAGES} AND name = {q.bind(name)} AND {pages}")
        else:
            counted = f" UNION ALL SELECT {day_bucket}, c FROM {day_rows} WHERE dim = {dim} AND name = {q.bind(name)}"
        cond += analytics_days.other_days(q, start, end, listed)
    rows = await store.query(
        f"SELECT b, sum(c) FROM (SELECT toUnixTimestamp({bucket(q, interval, time_zone)}) AS b, count() AS c "
        f"FROM {table} FINAL WHERE {cond} GROUP BY b{counted}) GROUP BY b", q.params)
    return filled({b: n for b, n in rows}, interval=interval, first=first, last=last, time_zone=time_zone)


def filled(counts: dict[int, int], *, interval: str, first: datetime, last: datetime,
           time_zone: str = "UTC") -> list[tuple[datetime, int]]:
    """Every bucket from first to last with its count (by unix start), zero where `counts` has none. Days
    follow the site's calendar: one across a daylight-saving change lasts 23 or 25 hours."""
    out, at, zone = [], first, ZoneInfo(time_zone)
    while at <= last:
        out.append((at, counts.get(int(at.timestamp()), 0)))
        at = next_bucket(at, interval, zone)
    return out


def next_bucket(at: datetime, interval: str, zone: ZoneInfo) -> datetime:
    """The start of the bucket after the one starting at `at` (in UTC)."""
    if interval != "day":
        return at + STEP[interval]
    day = at.astimezone(zone).date() + timedelta(days=1)
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


# --- top lists --------------------------------------------------------------------------------------

async def top(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, dim: str, name: str,
              domain: str | None, limit: int, filters: Filters, offset: int = 0) -> tuple[list[tuple[str, int]], int]:
    """The `limit` most frequent non-empty keys of a dimension among events called `name`, after the first
    `offset`, and the total over all non-empty keys (the base of the percentages). Referrers from the site
    itself are left out."""
    q, table = Params(), store.table("site_events")
    terms = [*filters.without_name().terms(), Filter("event", "==", name)]
    cond = where(q, table, site_id, start, end, terms)
    key = _TOP_KEY[dim]
    cond += f" AND {key} != ''"
    if dim == "r" and domain:
        cond += f" AND NOT {own_referrer(q, 'referrer_host', domain)}"
    listed = (f"SELECT key, c, sum(c) OVER () AS total FROM (SELECT {key} AS key, count() AS c FROM {table} FINAL "
              f"WHERE {cond} GROUP BY key) ORDER BY c DESC, key LIMIT {q.bind(limit, 'UInt32')}")
    rows = await store.query(f"{listed} OFFSET {q.bind(offset, 'UInt64')}", q.params)
    if not rows and offset:  # past the end of the list: no rows, and the list's total still
        first = await store.query(listed, q.params)
        return [], (first[0][2] if first else 0)
    return [(k, c) for k, c, _ in rows], (rows[0][2] if rows else 0)


async def count_events(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                       terms: list[Filter]) -> int:
    """Events of a window matching the filter terms (the event log's total)."""
    q, table = Params(), store.table("site_events")
    cond = where(q, table, site_id, start, end, terms)
    return (await store.query(f"SELECT count() FROM {table} FINAL WHERE {cond}", q.params))[0][0]


async def matching_event_keys(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, filters: Filters,
                              after: tuple[datetime, str] | None, limit: int,
                              offset: int = 0) -> list[tuple[datetime, str]]:
    """The (ts, id) keys of a window's events matching the filters, newest first, strictly before `after`
    and past the first `offset`: an export (by `after`) or the event log (by `offset`) under the overview's
    filters pages through them and reads the rows from PostgreSQL. A copy of an event has the same key:
    DISTINCT, no FINAL."""
    q, table = Params(), store.table("site_events")
    cond = where(q, table, site_id, start, end, filters.terms())
    if after is not None:
        cond += f" AND (ts, id) < ({q.bind(after[0], TS)}, {q.bind(after[1])})"
    rows = await store.query(f"SELECT DISTINCT ts, id FROM {table} WHERE {cond} ORDER BY ts DESC, id DESC "
                             f"LIMIT {q.bind(limit, 'UInt32')} OFFSET {q.bind(offset, 'UInt64')}", q.params)
    # The client returns the UTC times without their zone.
    return [(ts if ts.tzinfo else ts.replace(tzinfo=UTC), event_id) for ts, event_id in rows]
