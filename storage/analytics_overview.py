"""The site overview (headline numbers, the three top lists and the series) in three queries on the
analytics store, from the reads of storage/analytics.py; unfiltered, with the day rows of
storage/analytics_days.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime

from storage import analytics_days, analytics_windows
from storage.analytics import (
    TOP_DIMENSIONS,
    TOTALS,
    VISIT_SUMS,
    Filters,
    SessionStats,
    Totals,
    bucket,
    matching_sessions,
    own_referrer,
    session_rows,
    sessions_of,
    where,
)
from storage.analytics_lists import STEP, filled
from storage.clickhouse import AnalyticsStore, Params
from storage.site_filters import Filter


async def overview(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, name: str,
                   interval: str, first: datetime, last: datetime, domain: str | None, limit: int,
                   filters: Filters, time_zone: str = "UTC") -> tuple[
                       Totals, SessionStats, dict[str, tuple[list[tuple[str, int]], int]], list[tuple[datetime, int]]]:
    """The whole overview in three queries instead of six, read side by side (storage.clickhouse.READERS): the
    totals and the session statistics (unfiltered, each its own query; under filters, the totals and then the
    matching visits), and the three top lists and the series in one scan (GROUPING SETS). Unfiltered, the
    counts of ended days, the visits that started on them and the visitors of whole days come from the day
    rows (plus the query that finds them, and once a day the one that counts an ended day). The same numbers
    as totals(), session_stats() and analytics_lists's top() and series(), whose buckets are the site's
    `time_zone`'s."""
    if filters.terms():
        days = analytics_days.NONE
        head = _filtered_head(store, site_id, start, end, filters)
    else:
        whole = analytics_days.whole_days(start, end)
        days = await analytics_days.counted_days(store, site_id, start, end) if whole else analytics_days.NONE
        head = _unfiltered_head(store, site_id, start, end, whole, days)
    (events, pageviews, visitors, *visits), (tops, counts) = await asyncio.gather(
        head, _lists(store, site_id, start, end, name=name, interval=interval, first=first, last=last,
                     domain=domain, limit=limit, filters=filters, days=days, time_zone=time_zone))
    return (Totals(events, pageviews, visitors), SessionStats.of(*visits), tops,
            filled(counts, interval=interval, first=first, last=last, time_zone=time_zone))


async def _lists(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, name: str, interval: str,
                 first: datetime, last: datetime, domain: str | None, limit: int, filters: Filters,
                 days: analytics_days.CountedDays, time_zone: str) -> tuple[
                     dict[str, tuple[list[tuple[str, int]], int]], dict[int, int]]:
    """The three top lists and the series counts (by bucket start), the counted `days` from their rows."""
    q, table = Params(), store.table("site_events")
    lists = [*filters.without_name().terms(), Filter("event", "==", name)]
    # The day rows hold daily and hourly buckets (SERIES_ROWS), so a daily or hourly series of whole days
    # comes from them with the lists (the 7-day overview, the dashboard's default, is hourly; a site's zone
    # of whole hours takes its days from the hourly rows, analytics_days.series_rows).
    listed, series_dim, day_bucket = (analytics_days.series_rows(q, days, interval, time_zone, start, end)
                                      if len(lists) == 1 else ([], 0, ""))
    cond = where(q, table, site_id, start, end, lists) + analytics_days.other_days(q, start, end, listed)
    referrer, own = "referrer_host", "0"
    if domain:
        own = own_referrer(q, "key", domain)
        referrer = f"if({own_referrer(q, 'referrer_host', domain)}, '', referrer_host)"
    counted = ""
    if listed:  # k 3 is the series
        counted = (f" UNION ALL SELECT if(dim = {series_dim}, 3, dim), if(dim = {series_dim} OR (dim = 1 AND {own}), "
                   f"'', key), if(dim = {series_dim}, {day_bucket}, 0), c FROM "
                   f"{analytics_days.counts_of(q, store, site_id, days, listed)} WHERE name = {q.bind(name)} "
                   f"AND dim IN (0, 1, 2, {series_dim})")
    buckets = round((last - first) / STEP[interval]) + 1  # a day may last 23 or 25 hours (filled)
    # Each list's first keys by count, and its total, aggregated by list rather than sorted out of every key
    # (LIMIT BY) beside a window's sum: the store sorts a block and holds a window's rows in memory whole, and
    # 60k distinct pages near 2 KB took that past a 384 MB bound; a grouping spills, and the sorted arrays keep
    # `kept` entries each. (-c, key, b) orders by count, then key, then bucket.
    kept = max(limit, buckets)
    rows = await store.query(
        f"SELECT k, sum(c), groupArraySorted({q.bind(kept, 'UInt32')})((-toInt64(c), key, b)) FROM ("
        "SELECT k, key, b, sum(c) AS c FROM ("
        "SELECT multiIf(p != '', 0, r != '', 1, g != '', 2, b != 0, 3, 4) AS k, concat(p, r, g) AS key, b, c FROM ("
        f"SELECT page AS p, {referrer} AS r, country AS g, toUnixTimestamp({bucket(q, interval, time_zone)}) AS b, "
        f"count() AS c FROM {table} FINAL WHERE {cond} GROUP BY GROUPING SETS ((p), (r), (g), (b))){counted}) "
        "WHERE k = 3 OR (k < 3 AND key != '') GROUP BY k, key, b) GROUP BY k", q.params)
    tops: dict[str, tuple[list[tuple[str, int]], int]] = {dim: ([], 0) for dim in TOP_DIMENSIONS}
    counts: dict[int, int] = {}
    for k, total, firsts in rows:
        if k == 3:
            counts = {b: -c for c, _, b in firsts}
        else:
            tops[TOP_DIMENSIONS[k]] = ([(key, -c) for c, key, _ in firsts[:limit]], total)
    return tops, counts


async def _filtered_head(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                         filters: Filters) -> tuple:
    """Totals and visit statistics under filters, in two queries: the totals, how many session rows the
    window has and whether its last day has events after its end (sessions_of's `tail_ended`), then the
    visits holding a matching event, found the way that costs less for this share of
    matching events (sessions_of: `only` builds the set of matching sessions, `marked` groups the matching
    events with the session rows; at 10M events the set took 162 against 204 ms for `country = DE`, 495
    against 296 ms for `page contains /blog`, which matches every visit)."""
    q, table = Params(), store.table("site_events")
    cond = where(q, table, site_id, start, end, filters.terms())
    rows_sql = session_rows(q, store, site_id, start, end)
    tail_sql = analytics_days.tail_ended_sql(q, store, site_id, end)
    events, pageviews, visitors, rows, tail_ended = (await store.query(
        f"SELECT {TOTALS}, ({rows_sql}), {tail_sql} FROM {table} FINAL WHERE {cond}", q.params))[0]
    q, tail_ended = Params(), bool(tail_ended)
    if events > rows:  # more matching events than session rows: a set would hold most of the window's visits
        visits = sessions_of(q, store, site_id, start, end, tail_ended=tail_ended,
                             marked=where(q, table, site_id, start, end, filters.terms()))
    else:
        visits = sessions_of(q, store, site_id, start, end, tail_ended=tail_ended,
                             only=matching_sessions(q, store, site_id, start, end, filters))
    return (events, pageviews, visitors, *(await store.query(VISIT_SUMS + visits, q.params))[0])


async def _unfiltered_head(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                           whole: list[date], days: analytics_days.CountedDays) -> tuple:
    """Totals and visit statistics without filters, in two queries side by side: the ended (counted) days'
    counts and visits and every `whole` day's visitors come from the day rows, the rest of the window from
    the events and session rows (storage/analytics_days.py)."""
    q, table = Params(), store.table("site_events")
    # The day the window starts inside (7 days by the hour), when counted: its hours from the start on.
    partial = [days.partial] if days.partial else []
    from_hour = q.bind(start.astimezone(UTC).hour, "UInt8")
    if days.visits or partial:
        stored = set(days.visits + partial)
        live = [d for d in analytics_days.window_days(start, end) if d not in stored]
        parts = [VISIT_SUMS + sessions_of(q, store, site_id, start, end, started_on=live, tail_ended=days.tail_ended)]
        for visit_days, hours in ((days.visits, ""), (partial, f" AND toUInt8OrZero(name) >= {from_hour}")):
            if visit_days:  # the visit rows of each hour they started in (key: visits, bounces, duration_us)
                parts.append("SELECT sumIf(c, key = 'visits'), sumIf(c, key = 'bounces'), "
                             f"sumIf(c, key = 'duration_us') FROM "
                             f"{analytics_days.counts_of(q, store, site_id, days, visit_days)} "
                             f"WHERE dim = {analytics_days.VISITS}{hours}")
        sessions = (f"SELECT sum(visits) AS visits, sum(bounces) AS bounces, sum(us) AS us FROM ("
                    f"{' UNION ALL '.join(parts)})")
    else:
        sessions = VISIT_SUMS + sessions_of(q, store, site_id, start, end, tail_ended=days.tail_ended)
    cond = where(q, table, site_id, start, end, [])
    if whole:
        uncounted = analytics_days.other_days(q, start, end, days.counts + partial)
        counted = (f" UNION ALL SELECT sum(c), sumIf(c, name = 'pageview') FROM "
                   f"{analytics_days.counts_of(q, store, site_id, days, days.counts)} "
                   f"WHERE dim = {analytics_days.TOTAL}") if days.counts else ""
        if partial:
            counted += (f" UNION ALL SELECT sum(c), sumIf(c, name = 'pageview') FROM "
                        f"{analytics_days.counts_of(q, store, site_id, days, partial)} "
                        f"WHERE dim = {analytics_days.HOURS} AND toUInt8OrZero(key) >= {from_hour}")
        totals = (f"SELECT events, pageviews, visitors FROM (SELECT sum(e) AS events, sum(p) AS pageviews FROM ("
                  f"SELECT count() AS e, countIf(name = 'pageview') AS p FROM {table} "
                  f"FINAL WHERE {cond}{uncounted}{counted})) AS x CROSS JOIN "
                  f"({await _visitors_sql(q, store, site_id, start, end, whole, days)}) AS v")
    else:
        totals = f"SELECT {TOTALS} FROM {table} FINAL WHERE {cond}"
    # Apart, beside the lists (three reads at once), rather than cross-joined in one query: at 10M events the
    # unfiltered 30-day overview 83-95 -> 73-81 ms, the 7-day one 120-142 -> 106-131.
    totals_row, sessions_row = await asyncio.gather(*(store.query(sql, q.used_in(sql)) for sql in (totals, sessions)))
    return (*totals_row[0], *sessions_row[0])


async def visitors(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                   days: analytics_days.CountedDays | None = None) -> int:
    """The window's unique visitors without filters, as the unfiltered overview counts them. Without the
    window's counted `days`, it counts no day (analytics_windows.written_days), so it runs beside an overview
    that may be counting them; with them (the night's warming), it states the same days as the overview does,
    the day the window ends inside included when that has ended (CountedDays.tail_ended)."""
    q = Params()
    whole = analytics_days.whole_days(start, end)
    if days is None:
        days = await analytics_windows.written_days(store, site_id, whole) if whole else analytics_days.NONE
    return (await store.query(await _visitors_sql(q, store, site_id, start, end, whole, days), q.params))[0][0]


async def _visitors_sql(q: Params, store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                        whole: list[date], days: analytics_days.CountedDays) -> str:
    """A one-row query (column visitors): the window's unique visitors, every `whole` day's from the day rows
    (analytics_windows.visitor_states), and the day the window ends inside too when none of its events is at or
    after the end (CountedDays.tail_ended: today's visitors of the 7-day overview); the rest of the window's
    from its events."""
    table = store.table("site_events")
    cond = where(q, table, site_id, start, end, [])
    if not whole:
        return f"SELECT uniqExactIf(visitor, visitor != 0) AS visitors FROM {table} WHERE {cond}"
    stated = [*whole, end.astimezone(UTC).date()] if days.tail_ended else whole  # consecutive days
    states = await analytics_windows.visitor_states(q, store, site_id, stated, days)
    if set(analytics_days.window_days(start, end)) == set(stated):  # no part day: no empty read of the events
        return f"SELECT uniqExactMerge(s) AS visitors FROM {states}"
    return (f"SELECT uniqExactMerge(s) AS visitors FROM ({states} UNION ALL SELECT uniqExactStateIf(visitor, "
            f"visitor != 0) FROM {table} WHERE {cond}{analytics_days.other_days(q, start, end, stated)})")
