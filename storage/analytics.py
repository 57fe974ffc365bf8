"""Aggregates of the site analytics API on the analytics store (ClickHouse): totals, visitors and sessions,
and the filters (from storage/site_filters.py) every read shares; time series and top lists are
storage/analytics_lists.py, the overview, which combines them, storage/analytics_overview.py.

Every count reads site_events with FINAL, so a mirror batch written twice still counts once; distinct
counts (visitors, visits) and `IN` sets are insensitive to copies and read without it. Visits, bounces,
durations and entry and exit pages come from the session-day rows the engine keeps (site_sessions,
idempotent min/max states, see sessions_of), a session being attributed to the window its first event
falls in. Windows are [start, end) in UTC. SQL is assembled from constant fragments; every value is a
bound parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import asyncpg

from storage import goals
from storage.clickhouse import TS_MAX, TS_MIN, AnalyticsStore, Params
from storage.clickhouse_schema import ENTRY, ENTRY_NONE, EXIT, EXIT_NONE, PV_MAX, PV_MIN
from storage.site_filters import DIMENSIONS, EVENT_PROPERTIES, PAGE_DIMENSIONS, Filter

TOP_DIMENSIONS = ("p", "r", "c")  # page, referrer host, country
# Columns of site_events behind each filterable dimension (entry/exit pages and goals are handled apart).
EVENT_DIMENSION_COLUMNS = {d: DIMENSIONS[d] for d in ("event", *EVENT_PROPERTIES)} | {"page": "page"}
# Per-visit dimensions: the column of sessions_of(..., visit=True) that holds a visit's value.
SESSION_DIMENSIONS = {"entry_page": "entry_page", "exit_page": "exit_page"}
TS = "DateTime64(6, 'UTC')"
DAY_MIN, DAY_MAX = date(1900, 1, 1), date(2299, 12, 31)  # Date32's range, as DateTime64's (storage.clickhouse)
PV_MIN_NONE = "18446744073709551615"  # pv_min's neutral element (min of UInt64)
SHORT_WINDOW = timedelta(days=7)  # windows up to this long state their days (in_window)
_BUCKET = {"minute": "toStartOfMinute", "hour": "toStartOfHour", "day": "toStartOfDay",
           "week": "toMonday", "month": "toStartOfMonth"}  # weeks and months: the Stats API's time dimensions


def bucket(q: Params, interval: str, time_zone: str = "UTC", column: str = "ts") -> str:
    """The start of the time bucket an event falls in, per interval, in the site's time zone: a day starts at
    its local midnight, and an hour at the local hour (half past the UTC one in India). Of `column`, a time
    or (in UTC) a day."""
    if time_zone == "UTC":
        return f"{_BUCKET[interval]}({column})"
    return f"{_BUCKET[interval]}({column}, {q.bind(time_zone)})"


class UnsupportedFilter(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class GoalFilter:
    """A `goal` term with the site's goals it may name; an unknown goal name matches nothing."""
    term: Filter
    goals: tuple

    @property
    def dimension(self) -> str:
        return "goal"


@dataclass(frozen=True, slots=True)
class Filters:
    """The spec's own filter parameters; `where()` turns them into site_filters terms."""
    name: str | None = None  # exact event name
    path: str | None = None  # case-insensitive substring of the page
    referrer: str | None = None  # case-insensitive substring of the referrer
    country: str | None = None  # exact two-letter code
    extra: tuple[Filter, ...] = ()  # `filter=` terms (issue 12 vocabulary)
    goals: tuple = ()  # the site's goals (Goal), which `goal` terms name

    def without_name(self) -> Filters:
        return Filters(None, self.path, self.referrer, self.country, self.extra, self.goals)

    def counted(self) -> str:
        """The event the series and top lists count: `eventName`, else an `event==` term's (the same filter
        in the filter= vocabulary), else an event goal's of a `goal==` term, else pageviews."""
        if self.name:
            return self.name
        for f in self.extra:
            if f.dimension == "event" and f.op == "==":
                return f.value
        for f in self.extra:
            goal = next((g for g in self.goals if g.name == f.value), None) \
                if f.dimension == "goal" and f.op == "==" else None
            if goal is not None and goal.event_name is not None:
                return goal.event_name
        return "pageview"

    def without_goals(self) -> Filters:
        return Filters(self.name, self.path, self.referrer, self.country,
                       tuple(f for f in self.extra if f.dimension != "goal"), self.goals)

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
        return [GoalFilter(f, self.goals) if f.dimension == "goal" else f for f in out]


async def site_in_workspace(conn: asyncpg.Connection, site_id: str, workspace_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT id, domain, time_zone FROM sites WHERE id = $1 AND workspace_id = $2", site_id, workspace_id
    )


# --- the where-builder ------------------------------------------------------------------------------

def page_pattern(value: str) -> str:
    """A page wildcard as an anchored RE2 pattern: `*` within one path segment, `**` across segments."""
    parts = []
    for i, chunk in enumerate(value.split("**")):
        if i:
            parts.append(".*")
        parts.append("[^/]*".join(re.escape(p) for p in chunk.split("*")))
    return "^" + "".join(parts) + "$"


def term(q: Params, column: str, f: Filter, page: bool) -> str:
    """The filter's condition on `column`: any of its values matching (none, for `!=`)."""
    if f.op == "~=":
        return _any([f"positionCaseInsensitiveUTF8({column}, {q.bind(v)}) > 0" for v in f.values])
    cond = _any([f"match({column}, {q.bind(page_pattern(v))})" if page and "*" in v else f"{column} = {q.bind(v)}"
                 for v in f.values])
    return cond if f.op == "==" else f"NOT ({cond})"


def _any(conditions: list[str]) -> str:
    return conditions[0] if len(conditions) == 1 else f"({' OR '.join(conditions)})"


def _column(q: Params, f: Filter) -> str:
    key = f.prop_key
    if key is not None:
        return f"JSONExtractString(properties, {q.bind(key)})"
    if f.dimension not in EVENT_DIMENSION_COLUMNS:
        raise UnsupportedFilter(f"cannot filter on {f.dimension}")
    return EVENT_DIMENSION_COLUMNS[f.dimension]


def event_conditions(q: Params, filters: list[Filter]) -> list[str]:
    """Per-event conditions of the filters (not the site or window)."""
    out = []
    for f in filters:
        if f.dimension in ("entry_page", "exit_page"):
            continue
        if isinstance(f, GoalFilter):
            if f.term.op == "~=":
                raise UnsupportedFilter("goal filters take == or !=")
            named = [g for g in f.goals if g.name in f.term.values]
            cond = " OR ".join(goal_condition(q, g) for g in named) or "0"
            out.append(f"({cond})" if f.term.op == "==" else f"NOT ({cond})")
            continue
        out.append(term(q, _column(q, f), f, f.dimension in PAGE_DIMENSIONS))
    return out


def own_referrer(q: Params, column: str, domain: str) -> str:
    """Whether a referrer host (`column`) is the site's `domain` or a subdomain of it, or this machine (a site
    tried out on localhost): internal navigation, which the referrer lists and breakdown leave out (matched at
    read time: a site's domain may change)."""
    d = q.bind(domain.lower())
    return f"({column} = {d} OR endsWith({column}, concat('.', {d})) OR {column} IN ('localhost', '127.0.0.1'))"


def in_window(q: Params, start: datetime, end: datetime) -> str:
    """`start <= ts < end` on site_events, with the UTC days it spans stated too, for short windows: the
    sorting key holds toDate(ts), and the index analysis does not derive the days from a bound on ts (a
    day's read at 10M events selected 686 of 1,052 granules instead of 27). Not for long windows: there the
    day of every row read costs more than the granules it skips (a 30-day series 53 -> 68-77 ms at 10M
    events); where() uses it up to SHORT_WINDOW."""
    first, last = (max(DAY_MIN, min(DAY_MAX, t.astimezone(UTC).date())) for t in (start, end))
    return (f"toDate(ts) >= {q.bind(first, 'Date32')} AND toDate(ts) <= {q.bind(last, 'Date32')} "
            f"AND ts >= {q.bind(start, TS)} AND ts < {q.bind(end, TS)}")


def where(q: Params, table: str, site_id: str, start: datetime, end: datetime, filters: list[Filter], *,
          days: bool = False) -> str:
    """Site, window and every filter as one condition on site_events (or a table of its columns); the window's
    days stated for short windows (in_window), or for any with `days`."""
    window = in_window(q, start, end) if days or end - start <= SHORT_WINDOW else \
        f"ts >= {q.bind(start, TS)} AND ts < {q.bind(end, TS)}"
    sql = [f"site_id = {q.bind(site_id)}", window, *event_conditions(q, filters)]
    visit = [f for f in filters if f.dimension in SESSION_DIMENSIONS]
    if visit:  # a session-level dimension: events of the sessions whose entry/exit page matches
        sessions = _sessions_sql(q, table, site_id, start, end, started_in_window=False, visit=True)
        matching = " AND ".join(term(q, SESSION_DIMENSIONS[f.dimension], f, True) for f in visit)
        sql.append(f"session IN (SELECT session FROM {sessions} WHERE {matching})")
    return " AND ".join(sql)


# --- totals -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Totals:
    events: int
    pageviews: int
    visitors: int


# The Totals of the site_events rows a query reads (with FINAL: counts).
TOTALS = "count() AS events, countIf(name = 'pageview') AS pageviews, uniqExactIf(visitor, visitor != 0) AS visitors"


async def totals(store: AnalyticsStore, site_id: str, start: datetime, end: datetime, filters: Filters) -> Totals:
    q, table = Params(), store.table("site_events")
    cond = where(q, table, site_id, start, end, filters.terms())
    rows = await store.query(f"SELECT {TOTALS} FROM {table} FINAL WHERE {cond}", q.params)
    return Totals(*rows[0])


# --- sessions ---------------------------------------------------------------------------------------

def lookback_start(start: datetime) -> datetime:
    """Where the events of the sessions of a window starting at `start` are looked for: the day before."""
    return datetime.combine(start.astimezone(UTC).date() - timedelta(days=1), time(), UTC)


def sessions_of(q: Params, store: AnalyticsStore, site_id: str, start: datetime, end: datetime, *,
                started_in_window: bool = True, visit: bool = False, only: str = "", marked: str = "",
                started_on: list[date] | None = None, tail_ended: bool = False) -> str:
    """A subquery of sessions (session, f, l, pf, pl: first and last event, least and greatest pageview id
    hash, equal when exactly one pageview) over their events from the day before `start`'s (the look-back)
    to `end`; with `started_in_window`, only those whose first event is at or after `start`. With `visit`,
    also v (the visitor, 0 for none), entry_page and exit_page ('' when the session has no pageview).
    `only`: a condition on `session` (an IN set), applied to the grouped sessions (once: applied to the
    rows of both sources before grouping, the set was built twice, which cost more than it saved).
    `marked`: a condition on site_events rows (a where()); only the sessions holding such a row are kept,
    found by grouping those rows with the session rows (as neutral values marked 1) rather than by a set:
    cheaper than `only` when most sessions hold one. `started_on`: only the sessions that started on these
    UTC days, from the session rows of the days around them (a session lasts less than a day).

    Whole days come from the engine's session-day rows (site_sessions); the part of `end`'s own day before
    `end` from its rows too when the day holds no event at or after `end`, else from the events, so events
    after `end` never count. `tail_ended`: the caller knows that day holds no such event
    (CountedDays.tail_ended), so its rows are read with the other days' (one read of the session rows; two
    cost today's visits ~25 ms more). min/max are idempotent: no FINAL."""
    return _sessions_sql(q, store.table("site_events"), site_id, start, end, started_in_window=started_in_window,
                         visit=visit, only=only, marked=marked, started_on=started_on, tail_ended=tail_ended)


def session_rows(q: Params, store: AnalyticsStore, site_id: str, start: datetime, end: datetime) -> str:
    """A scalar subquery: how many session rows sessions_of groups for this window (from the sorting key)."""
    return (f"SELECT count() FROM {store.table('site_sessions')} WHERE site_id = {q.bind(site_id)} "
            f"AND day >= {q.bind(lookback_start(start).date(), 'Date')} "
            f"AND day < {q.bind(end.astimezone(UTC).date(), 'Date')}")


def _sessions_sql(q: Params, table: str, site_id: str, start: datetime, end: datetime, *, started_in_window: bool,
                  visit: bool, only: str = "", marked: str = "", started_on: list[date] | None = None,
                  tail_ended: bool = False) -> str:
    days = table.removesuffix("site_events") + "site_sessions"  # the same database, and kind of table
    site = q.bind(site_id)
    first_day = lookback_start(start).date()
    last_day = end.astimezone(UTC).date()  # whole days before it come from site_sessions
    # The part of end's own day in the window, if any.
    tail_start = max(datetime.combine(last_day, time(), UTC), datetime.combine(first_day, time(), UTC))
    conds = ([f"f >= {q.bind(start, TS)}"] if started_in_window else []) + ([only] if only else [])
    days_around = ""
    if started_on is not None:
        conds.append(f"toDate(f) IN {q.bind(started_on, 'Array(Date)')}")
        one = timedelta(days=1)
        starts, nexts = set(started_on), {d + one for d in started_on}
        # The day before a start day (unless a start day or the day after one itself) only tells which
        # sessions began earlier: they are left out by a set of its sessions rather than grouped with the
        # rest (today's visits in the 30-day overview at 10M events: 63 -> 37-42 ms of CPU).
        before = sorted({d - one for d in started_on} - starts - nexts)
        days_around = f"AND day IN {q.bind(sorted(starts | nexts), 'Array(Date)')} "
        if before:
            conds.append(f"session NOT IN (SELECT session FROM {days} WHERE site_id = {site} "
                         f"AND day IN {q.bind(before, 'Array(Date)')})")
    states, raw, merged, neutral, marks = "", "", "", "", ""
    if visit:
        states, raw = ", visitor, entry, exit", f", visitor, {ENTRY}, {EXIT}"
        neutral = f", 0, {ENTRY_NONE}, {EXIT_NONE}"
        merged = (", max(visitor) AS v, tupleElement(min(entry), 4) AS entry_page, "
                  "tupleElement(max(exit), 4) AS exit_page")
    if marked:  # the matching events, with values min/max ignore: a session of them alone has l < f
        states, raw = states + ", 0 AS m", raw + ", 0"
        marks = (f" UNION ALL SELECT session, {q.bind(TS_MAX, TS)}, {q.bind(TS_MIN, TS)}, {PV_MIN_NONE}, 0{neutral}, "
                 f"1 FROM {table} WHERE {marked} AND session != 0")
        conds += ["max(m) = 1", "l >= f"]
    having = f" HAVING {' AND '.join(conds)}" if conds else ""
    rows = f"SELECT session, first, last, pv_min, pv_max{states} FROM {days} WHERE site_id = {site} "
    ended, tail_rows, events = "", "", ""
    rows_end = f"day < {q.bind(last_day, 'Date')}"
    if tail_start < end and tail_ended:
        rows_end = f"day <= {q.bind(last_day, 'Date')}"
    elif tail_start < end:
        # `end`'s own day from its session rows when none of its events is at or after `end` (a window that
        # ends now), which costs less than grouping the day's events again (the visits of a 24-hour window at
        # 10M events: 46-55 -> 38-43 ms); else from its events before `end`, so later ones never count.
        day = q.bind(last_day, "Date")
        ended = (f"WITH (SELECT max(last) FROM {days} WHERE site_id = {site} AND day = {day}) < {q.bind(end, TS)} "
                 "AS ended ")
        tail_rows = f"UNION ALL {rows}AND day = {day} AND ended "
        # A window that ends at midnight has no tail: an empty union part still cost today's visits ~20 ms.
        events = (f"UNION ALL SELECT session, ts, ts, {PV_MIN}, {PV_MAX}{raw} FROM {table} WHERE site_id = {site} "
                  f"AND {in_window(q, tail_start, end)} AND NOT ended AND session != 0")
    return (
        f"({ended}SELECT session, min(first) AS f, max(last) AS l, min(pv_min) AS pf, max(pv_max) AS pl{merged} "
        f"FROM ({rows}AND day >= {q.bind(first_day, 'Date')} AND {rows_end} {days_around}"
        f"{tail_rows}{events}{marks}) GROUP BY session{having})"
    )


def matching_sessions(q: Params, store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                      filters: Filters) -> str:
    """The condition "the session holds an event of the window that matches the filters" ('' without filters).
    Copies of an event change no set: no FINAL."""
    terms = filters.terms()
    if not terms:
        return ""
    table = store.table("site_events")
    return f"session IN (SELECT session FROM {table} WHERE {where(q, table, site_id, start, end, terms)})"


@dataclass(frozen=True, slots=True)
class SessionStats:
    sessions: int
    bounces: int  # sessions with exactly one pageview
    avg_ms: float

    @classmethod
    def of(cls, sessions: int, bounces: int, duration_us: int) -> SessionStats:
        """From the sessions' summed duration: the same numbers whether summed per day or at once."""
        return cls(sessions, bounces, duration_us / sessions / 1000 if sessions else 0.0)


# The statistics of a subquery of sessions_of's rows: visits, bounces, summed duration in microseconds.
VISIT_SUMS = ("SELECT count() AS visits, countIf(pf = pl) AS bounces, "
               "toUInt64(sum(dateDiff('microsecond', f, l))) AS us FROM ")


async def session_stats(store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                        filters: Filters) -> SessionStats:
    """Sessions whose first event is in the window; with filters, only those holding a matching event."""
    q = Params()
    only = matching_sessions(q, store, site_id, start, end, filters)
    sql = VISIT_SUMS + sessions_of(q, store, site_id, start, end, only=only)
    return SessionStats.of(*(await store.query(sql, q.params))[0])


# --- goals ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Goal:
    name: str  # display name: the event name, or "Visit <page_path>"
    event_name: str | None
    page_path: str | None


async def site_goals(conn: asyncpg.Connection, site_id: str) -> list[Goal]:
    return [Goal(goals.display_name(r["goal_type"], r["event_name"], r["page_path"]), r["event_name"], r["page_path"])
            for r in await goals.list_goals(conn, site_id)]


def goal_condition(q: Params, goal: Goal) -> str:
    if goal.event_name is not None:
        return f"name = {q.bind(goal.event_name)}"
    return f"(name = 'pageview' AND {term(q, 'page', Filter('page', '==', goal.page_path or ''), True)})"
