"""Aggregates of the site analytics API: totals, visitors, sessions, time series and top lists.

Each aggregate has two sources. Rollups (migration 0004, grain 'h' or 'd') answer unfiltered windows
that start on an hour or day boundary; raw events answer the 1h range, minute series and any
path/referrer/country filter. Both use the same key functions, so they agree to the row (the tests
and bench/analytics.py compare them). Windows are [start, end) in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

DIMENSIONS = ("p", "r", "c")  # page, referrer host, country
# Raw column and key expression of each dimension; keys are computed once per distinct raw value.
_DIM_KEY = {
    "p": ("path", "tally_page_key(raw)"),
    "r": ("referrer", "tally_referrer_key(raw, ${})"),
    "c": ("country", "nullif(raw, '')"),
}


@dataclass(frozen=True, slots=True)
class Filters:
    name: str | None = None  # exact event name
    path: str | None = None  # case-insensitive substring
    referrer: str | None = None  # case-insensitive substring
    country: str | None = None  # exact two-letter code

    @property
    def beyond_rollups(self) -> bool:
        """Rollups carry no path/referrer/country dimension combined with another one."""
        return bool(self.path or self.referrer or self.country)


async def site_in_workspace(conn: asyncpg.Connection, site_id: str, workspace_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT id, domain FROM sites WHERE id = $1 AND workspace_id = $2", site_id, workspace_id
    )


def raw_where(args: list, filters: Filters, *, name: str | None = None) -> str:
    """Conditions on events for args = [site_id, start, end, ...]; appends the filter values to args.
    `name` (when given) replaces filters.name. Fragments are constants; values are always bound."""
    sql = ["site_id = $1 AND ts >= $2 AND ts < $3"]
    name = name if name is not None else filters.name
    if name is not None:
        args.append(name)
        sql.append(f"name = ${len(args)}")
    if filters.path:
        args.append(filters.path.lower())
        sql.append(f"strpos(lower(path), ${len(args)}) > 0")
    if filters.referrer:
        args.append(filters.referrer.lower())
        sql.append(f"strpos(lower(referrer), ${len(args)}) > 0")
    if filters.country:
        args.append(filters.country)
        sql.append(f"country = ${len(args)}")
    return " AND ".join(sql)


def rollup_spans(args: list, start: datetime, end: datetime, grain: str) -> str:
    """Condition on (grain, bucket) covering [start, end): an hour-aligned window reads daily rows for
    its whole UTC days and hourly rows only for the partial days at its edges (7d: ~40 hours + 6 days
    instead of 168 hours). Appends the bounds to args."""
    pieces = [(grain, start, end)]
    if grain == "h":
        first_day = _ceil_day(start)
        last_day = end.replace(hour=0, minute=0, second=0, microsecond=0)
        if first_day < last_day:
            pieces = [p for p in (("h", start, first_day), ("d", first_day, last_day), ("h", last_day, end))
                      if p[1] < p[2]]
    sql = []
    for piece in pieces:
        args.extend(piece)
        n = len(args)
        sql.append(f'(grain = ${n - 2}::text::"char" AND bucket >= ${n - 1} AND bucket < ${n})')
    return "(" + " OR ".join(sql) + ")"


def _ceil_day(moment: datetime) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if day == moment else day + timedelta(days=1)


# --- totals ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Totals:
    events: int
    pageviews: int
    visitors: int


async def totals(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime,
                 grain: str | None, filters: Filters) -> Totals:
    if grain is not None and filters.name is None and not filters.beyond_rollups:
        args: list = [site_id, start]
        spans = rollup_spans(args, start, end, grain)
        row = await conn.fetchrow(
            "SELECT coalesce(sum(events), 0)::bigint AS events, "
            "coalesce(sum(events) FILTER (WHERE name = 'pageview'), 0)::bigint AS pageviews, "
            "(SELECT count(*) FROM site_visitors WHERE site_id = $1 AND last_seen >= $2) AS visitors "
            f"FROM site_rollup_counts WHERE site_id = $1 AND {spans}",
            *args,
        )
    else:
        args: list = [site_id, start, end]
        where = raw_where(args, filters)
        row = await conn.fetchrow(
            "SELECT count(*) AS events, count(*) FILTER (WHERE name = 'pageview') AS pageviews, "
            f"count(DISTINCT ip_hash) AS visitors FROM events WHERE {where}",
            *args,
        )
    return Totals(row["events"], row["pageviews"], row["visitors"])


# --- sessions -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SessionStats:
    sessions: int
    bounces: int  # sessions with exactly one pageview
    avg_ms: float


async def session_stats(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime,
                        grain: str | None, filters: Filters) -> SessionStats:
    """Sessions that started in the window; with filters, only those holding a matching event."""
    if grain is not None and filters.name is None and not filters.beyond_rollups:
        args = [site_id]
        spans = rollup_spans(args, start, end, grain)
        row = await conn.fetchrow(
            "SELECT coalesce(sum(sessions), 0)::bigint AS sessions, coalesce(sum(bounces), 0)::bigint AS bounces, "
            "coalesce(sum(duration_us)::float8 / nullif(sum(sessions), 0) / 1000, 0)::float8 AS avg_ms "
            f"FROM site_session_rollups WHERE site_id = $1 AND {spans}",
            *args,
        )
        return SessionStats(row["sessions"], row["bounces"], row["avg_ms"])
    args: list = [site_id, start, end]
    scope = ""
    if filters.name is not None or filters.beyond_rollups:
        scope = f" AND id IN (SELECT session_id FROM events WHERE {raw_where(args, filters)})"
    row = await conn.fetchrow(
        "SELECT count(*) AS sessions, count(*) FILTER (WHERE pageviews = 1) AS bounces, "
        "coalesce(avg(extract(epoch FROM ended_at - started_at) * 1000), 0)::float8 AS avg_ms "
        f"FROM sessions WHERE site_id = $1 AND started_at >= $2 AND started_at < $3{scope}",
        *args,
    )
    return SessionStats(row["sessions"], row["bounces"], row["avg_ms"])


# --- time series ----------------------------------------------------------------------------------

_UNIT_SECONDS = {"minute": 60.0, "hour": 3600.0, "day": 86400.0}


async def series(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime, *,
                 name: str, interval: str, first: datetime, last: datetime, grain: str | None,
                 filters: Filters) -> list[tuple[datetime, int]]:
    """Counts of `name` per UTC bucket from first to last, zero buckets included."""
    args: list = [site_id, start, end]
    if grain is not None and not filters.beyond_rollups:
        args += [grain, name]
        agg = ("SELECT date_trunc(${u}, bucket, 'UTC') AS b, sum(events)::bigint AS v FROM site_rollup_counts "
               'WHERE site_id = $1 AND grain = $4::text::"char" AND name = $5 '
               "AND bucket >= $2 AND bucket < $3 GROUP BY 1")
    else:
        where = raw_where(args, filters, name=name)
        agg = "SELECT date_trunc(${u}, ts, 'UTC') AS b, count(*) AS v FROM events WHERE " + where + " GROUP BY 1"
    args += [interval, first, last, _UNIT_SECONDS[interval]]
    n = len(args)
    sql = (
        f"WITH agg AS ({agg.replace('${u}', f'${n - 3}')}) "
        f"SELECT s.b AS bucket, coalesce(agg.v, 0)::bigint AS value "
        f"FROM generate_series(${n - 2}::timestamptz, ${n - 1}::timestamptz, make_interval(secs => ${n})) AS s (b) "
        "LEFT JOIN agg ON agg.b = s.b ORDER BY s.b"
    )
    return [(r["bucket"], r["value"]) for r in await conn.fetch(sql, *args)]


# --- top lists ------------------------------------------------------------------------------------

async def top(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime, *, dim: str,
              name: str, domain: str | None, limit: int, grain: str | None,
              filters: Filters) -> tuple[list[tuple[str, int]], int]:
    """The `limit` most frequent non-empty keys of a dimension among events called `name`, and the
    total over all non-empty keys (the base of the percentages)."""
    args: list = [site_id, start, end]
    if grain is not None and not filters.beyond_rollups:
        args = [site_id, dim, name]
        spans = rollup_spans(args, start, end, grain)
        grouped = ('SELECT key, sum(events)::bigint AS c FROM site_rollup_dims WHERE site_id = $1 '
                   f'AND dim = $2::text::"char" AND name = $3 AND {spans} GROUP BY key')
    else:
        where = raw_where(args, filters, name=name)
        column, key = _DIM_KEY[dim]
        if dim == "r":
            args.append(domain)
            key = key.format(len(args))
        grouped = (f"SELECT {key} AS key, sum(c)::bigint AS c FROM (SELECT {column} AS raw, count(*) AS c "
                   f"FROM events WHERE {where} AND {column} <> '' GROUP BY {column}) e "
                   f"WHERE {key} IS NOT NULL GROUP BY 1")
    args.append(limit)
    rows = await conn.fetch(
        f"SELECT key, c, sum(c) OVER ()::bigint AS total FROM ({grouped}) g ORDER BY c DESC, key LIMIT ${len(args)}",
        *args,
    )
    return [(r["key"], r["c"]) for r in rows], (rows[0]["total"] if rows else 0)
