"""Day rows of the analytics store for unfiltered reads: the event counts of ended days (site_day_counts,
per event name and per page, referrer host and country) and the visitor sets of days (site_days).

Counts cannot come from a view: a mirror batch written twice would count twice. They are computed here,
from site_events read with FINAL, by the first read that needs a day once the day has ended and its last
insert has settled, and used while no insert has touched the day since (storage/clickhouse_schema.py,
COUNTS_TABLE). A read takes the days it may use from here and the rest of its window from the events.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from storage.clickhouse import AnalyticsStore, Params

TS = "DateTime64(6, 'UTC')"
MARKER = 255  # the row that completes a computation of one day
# The counted keys: dim -> site_events column (3: the name's total).
_KEYS = {0: "toString(page)", 1: "referrer_host", 2: "toString(country)", 3: "''"}


def whole_days(start: datetime, end: datetime) -> list[date]:
    """The UTC days lying entirely in [start, end)."""
    first = start.astimezone(UTC).date()
    if datetime.combine(first, time(), UTC) < start:
        first += timedelta(days=1)
    last = end.astimezone(UTC).date()  # exclusive: [last 00:00, end) is not whole
    return [first + timedelta(days=i) for i in range((last - first).days)]


async def counted_days(store: AnalyticsStore, site_id: str, start: datetime, end: datetime) -> list[date]:
    """The whole days of the window whose counts site_day_counts holds up to date, after computing those
    of the ended, settled days that lack them. Days without events are left out (the events have none)."""
    days = whole_days(start, end)
    if not days:
        return []
    q = Params()
    site, lo, hi = q.bind(site_id), q.bind(days[0], "Date"), q.bind(days[-1], "Date")
    rows = await store.query(
        "SELECT d.day, d.w, c.at, now64(6, 'UTC') FROM (SELECT day, max(written) AS w FROM "
        f"{store.table('site_days')} WHERE site_id = {site} AND day >= {lo} AND day <= {hi} GROUP BY day) AS d "
        f"LEFT JOIN (SELECT day, max(computed) AS at FROM {store.table('site_day_counts')} WHERE site_id = {site} "
        f"AND day >= {lo} AND day <= {hi} AND dim = {MARKER} GROUP BY day) AS c ON c.day = d.day", q.params)
    settle = timedelta(seconds=store.settle_seconds)
    fresh, stale = [], []
    for day, written, computed, now in rows:
        if computed > written + settle:
            fresh.append(day)
        elif day < now.date() and written + settle < now:
            stale.append(day)
    if stale:
        await _compute(store, site_id, stale)
        fresh += stale
    return sorted(fresh)


async def _compute(store: AnalyticsStore, site_id: str, days: list[date]) -> None:
    """Count the days from the events (FINAL), stamped with one server time read after every insert the
    days hold, then write the marker that makes the computation complete."""
    at = (await store.query("SELECT now64(6, 'UTC')"))[0][0]
    at = at if at.tzinfo else at.replace(tzinfo=UTC)  # clickhouse-connect may hand it back naive
    q = Params()
    site, stamp, chosen = q.bind(site_id), q.bind(at, TS), q.bind(days, "Array(Date)")
    table = store.table("site_events")
    parts = [f"SELECT toDate(ts) AS day, name, {dim} AS dim, {key} AS key, count() AS c FROM {table} FINAL "
             f"WHERE site_id = {site} AND toDate(ts) IN {chosen} GROUP BY day, name, key" for dim, key in _KEYS.items()]
    counts = store.table("site_day_counts")
    # Through a Distributed table the rows must be on the shard before the marker is: synchronous inserts.
    sync = {"insert_distributed_sync": 1} if store.cluster else None
    await store.command(f"INSERT INTO {counts} (site_id, day, computed, name, dim, key, c) "
                        f"SELECT {site}, day, {stamp}, name, dim, key, c FROM ({' UNION ALL '.join(parts)})", q.params,
                        settings=sync)
    q = Params()
    await store.command(f"INSERT INTO {counts} (site_id, day, computed, name, dim, key, c) SELECT {q.bind(site_id)}, "
                        f"arrayJoin({q.bind(days, 'Array(Date)')}), {q.bind(at, TS)}, '', {MARKER}, '', 0", q.params,
                        settings=sync)


def counts_of(q: Params, store: AnalyticsStore, site_id: str, days: list[date]) -> str:
    """A subquery of the latest complete computation's rows (day, name, dim, key, c) of `days`."""
    site, chosen = q.bind(site_id), q.bind(days, "Array(Date)")
    counts = store.table("site_day_counts")
    return (f"(SELECT day, name, dim, key, c FROM {counts} WHERE site_id = {site} AND day IN {chosen} "
            f"AND dim != {MARKER} AND (day, computed) IN (SELECT day, max(computed) FROM {counts} "
            f"WHERE site_id = {site} AND day IN {chosen} AND dim = {MARKER} GROUP BY day))")


def not_in(q: Params, days: list[date]) -> str:
    """The condition on site_events rows that leaves out `days` ('' when none)."""
    return f" AND toDate(ts) NOT IN {q.bind(days, 'Array(Date)')}" if days else ""
