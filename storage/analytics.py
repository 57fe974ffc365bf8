"""Aggregates of the site analytics API on the analytics store (ClickHouse): totals, visitors, sessions,
time series and top lists, under any combination of filters from storage/site_filters.py.

Every read uses FINAL, so a mirror batch written twice still counts once. Sessions are derived per query
from the events (grouped by session id, with a 24-hour look-back so that a session is attributed to the
window its first event falls in). Windows are [start, end) in UTC. SQL is assembled from constant
fragments; every value is a bound parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from storage.clickhouse import AnalyticsStore, bind_value
from storage.site_filters import DIMENSIONS, PAGE_DIMENSIONS, Filter

TOP_DIMENSIONS = ("p", "r", "c")  # page, referrer host, country
_TOP_KEY = {"p": "page", "r": "referrer_host", "c": "country"}
SESSION_LOOKBACK = timedelta(hours=24)
# Columns of site_events behind each filterable dimension (entry/exit pages and goals are handled apart).
_COLUMN = {d: c for d, c in DIMENSIONS.items() if d not in ("entry_page", "exit_page", "goal")} | {"page": "page"}
_ENTRY = "argMinIf(page, (ts, id), name = 'pageview' AND page != '')"
_EXIT = "argMaxIf(page, (ts, id), name = 'pageview' AND page != '')"
_UNIT = {"minute": "toStartOfMinute(ts)", "hour": "toStartOfHour(ts)", "day": "toStartOfDay(ts)"}


class UnsupportedFilter(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Filters:
    """The spec's own filter parameters; `where()` turns them into site_filters terms."""
    name: str | None = None  # exact event name
    path: str | None = None  # case-insensitive substring of the page
    referrer: str | None = None  # case-insensitive substring of the referrer
    country: str | None = None  # exact two-letter code
    extra: tuple[Filter, ...] = ()  # `filter=` terms (issue 12 vocabulary)

    def terms(self) -> list[Filter]:
        out = list(self.extra)
        if self.name:
            out.append(Filter("event", "==", self.name))
        if self.path:
            out.append(Filter("page", "~=", self.path))
        if self.referrer:
            out.append(Filter("referrer", "~=", self.referrer))
        if self.country:
            out.append(Filter("country", "==", self.country))
        return out

    def without_name(self) -> Filters:
        return Filters(None, self.path, self.referrer, self.country,
                       tuple(f for f in self.extra if f.dimension != "event"))


async def site_in_workspace(conn: asyncpg.Connection, site_id: str, workspace_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT id, domain FROM sites WHERE id = $1 AND workspace_id = $2", site_id, workspace_id
    )


# --- the where-builder ------------------------------------------------------------------------------

class Query:
    """Bound parameters of one statement, named p0, p1, ..."""

    def __init__(self) -> None:
        self.params: dict = {}

    def bind(self, value: object, kind: str = "String") -> str:
        name = f"p{len(self.params)}"
        self.params[name] = bind_value(value)
        return "{" + name + ":" + kind + "}"


def page_pattern(value: str) -> str:
    """A page wildcard as an anchored RE2 pattern: `*` within one path segment, `**` across segments."""
    parts = []
    for i, chunk in enumerate(value.split("**")):
        if i:
            parts.append(".*")
        parts.append("[^/]*".join(re.escape(p) for p in chunk.split("*")))
    return "^" + "".join(parts) + "$"


def _term(q: Query, column: str, f: Filter, page: bool) -> str:
    if f.op == "~=":
        return f"positionCaseInsensitiveUTF8({column}, {q.bind(f.value)}) > 0"
    if page and "*" in f.value:
        cond = f"match({column}, {q.bind(page_pattern(f.value))})"
    else:
        cond = f"{column} = {q.bind(f.value)}"
    return cond if f.op == "==" else f"NOT ({cond})"


def _column(q: Query, f: Filter) -> str:
    key = f.prop_key
    if key is not None:
        return f"JSONExtractString(properties, {q.bind(key)})"
    if f.dimension not in _COLUMN:
        raise UnsupportedFilter(f"cannot filter on {f.dimension}")
    return _COLUMN[f.dimension]


def event_conditions(q: Query, filters: list[Filter]) -> list[str]:
    """Per-event conditions of the filters (not the site or window)."""
    out = []
    for f in filters:
        if f.dimension in ("entry_page", "exit_page"):
            continue
        out.append(_term(q, _column(q, f), f, f.dimension in PAGE_DIMENSIONS))
    return out


def where(q: Query, table: str, site_id: str, start: datetime, end: datetime, filters: list[Filter]) -> str:
    """Site, window and every filter as one condition on site_events."""
    site, lo, hi = q.bind(site_id), q.bind(start, "DateTime64(6, 'UTC')"), q.bind(end, "DateTime64(6, 'UTC')")
    sql = [f"site_id = {site}", f"ts >= {lo}", f"ts < {hi}", *event_conditions(q, filters)]
    visit = [f for f in filters if f.dimension in ("entry_page", "exit_page")]
    if visit:  # a session-level dimension: events of the sessions whose entry/exit page matches
        lookback = q.bind(start - SESSION_LOOKBACK, "DateTime64(6, 'UTC')")
        having = " AND ".join(_term(q, _ENTRY if f.dimension == "entry_page" else _EXIT, f, True) for f in visit)
        sql.append(f"session_id IN (SELECT session_id FROM {table} FINAL WHERE site_id = {site} "
                   f"AND ts >= {lookback} AND ts < {hi} AND session_id != '' GROUP BY session_id HAVING {having})")
    return " AND ".join(sql)


# --- totals -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Totals:
    events: int
    pageviews: int
    visitors: int


async def totals(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, filters: Filters) -> Totals:
    q, table = Query(), store.table("site_events")
    cond = where(q, table, site_id, start, end, filters.terms())
    rows = await store.query(
        f"SELECT count(), countIf(name = 'pageview'), uniqExactIf(visitor, visitor != 0) FROM {table} FINAL "
        f"WHERE {cond}", q.params)
    return Totals(*rows[0])


# --- sessions ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SessionStats:
    sessions: int
    bounces: int  # sessions with exactly one pageview
    avg_ms: float


async def session_stats(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                        filters: Filters) -> SessionStats:
    """Sessions whose first event is in the window; with filters, only those holding a matching event."""
    q, table = Query(), store.table("site_events")
    terms = filters.terms()
    site, hi = q.bind(site_id), q.bind(end, "DateTime64(6, 'UTC')")
    lo, lookback = q.bind(start, "DateTime64(6, 'UTC')"), q.bind(start - SESSION_LOOKBACK, "DateTime64(6, 'UTC')")
    having = f"first >= {lo}"
    if terms:
        sub = Query()
        sub.params = q.params
        match = where(sub, table, site_id, start, end, terms)
        having += f" AND countIf({match}) > 0"
    rows = await store.query(
        "SELECT count(), countIf(pageviews = 1), if(count() = 0, 0, avg(duration_us) / 1000) FROM ("
        "SELECT session_id, min(ts) AS first, countIf(name = 'pageview') AS pageviews, "
        "dateDiff('microsecond', min(ts), max(ts)) AS duration_us "
        f"FROM {table} FINAL WHERE site_id = {site} AND ts >= {lookback} AND ts < {hi} AND session_id != '' "
        f"GROUP BY session_id HAVING {having})", q.params)
    sessions, bounces, avg_ms = rows[0]
    return SessionStats(sessions, bounces, float(avg_ms))


# --- time series ------------------------------------------------------------------------------------

_STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


async def series(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, name: str,
                 interval: str, first: datetime, last: datetime, filters: Filters) -> list[tuple[datetime, int]]:
    """Counts of `name` per UTC bucket from first to last, zero buckets included."""
    q, table = Query(), store.table("site_events")
    terms = [*filters.without_name().terms(), Filter("event", "==", name)]
    cond = where(q, table, site_id, start, end, terms)
    rows = await store.query(
        f"SELECT toUnixTimestamp({_UNIT[interval]}) AS b, count() FROM {table} FINAL WHERE {cond} GROUP BY b",
        q.params)
    counts = {b: n for b, n in rows}
    step, out, at = _STEP[interval], [], first
    while at <= last:
        out.append((at, counts.get(int(at.timestamp()), 0)))
        at += step
    return out


# --- top lists --------------------------------------------------------------------------------------

async def top(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *, dim: str, name: str,
              domain: str | None, limit: int, filters: Filters) -> tuple[list[tuple[str, int]], int]:
    """The `limit` most frequent non-empty keys of a dimension among events called `name`, and the total
    over all non-empty keys (the base of the percentages). Referrers from the site itself are left out."""
    q, table = Query(), store.table("site_events")
    terms = [*filters.without_name().terms(), Filter("event", "==", name)]
    cond = where(q, table, site_id, start, end, terms)
    key = _TOP_KEY[dim]
    cond += f" AND {key} != ''"
    if dim == "r" and domain:
        d = q.bind(domain.lower())
        cond += f" AND referrer_host != {d} AND NOT endsWith(referrer_host, concat('.', {d}))"
    rows = await store.query(
        f"SELECT key, c, sum(c) OVER () AS total FROM (SELECT {key} AS key, count() AS c FROM {table} FINAL "
        f"WHERE {cond} GROUP BY key) ORDER BY c DESC, key LIMIT {q.bind(limit, 'UInt32')}", q.params)
    return [(k, c) for k, c, _ in rows], (rows[0][2] if rows else 0)


async def count_events(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                       name: str | None) -> int:
    """Events of a window (the event log's total)."""
    q, table = Query(), store.table("site_events")
    cond = where(q, table, site_id, start, end, [Filter("event", "==", name)] if name else [])
    return (await store.query(f"SELECT count() FROM {table} FINAL WHERE {cond}", q.params))[0][0]
