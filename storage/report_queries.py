"""The built-in report types (event volume, funnel, retention) on the analytics store's keyed_events table,
ordered by (workspace_id, env, name, ts) as these reads need.

A report's actor is the user_id, or the anonymous_id for events without one (prefixed so the two never
collide; the mirror stores it); funnels and retention group and join actors by its 64-bit hash, the
table's actor_key (storage/clickhouse_schema.py). Grouping by a user trait reads the traits from PostgreSQL
(profiles are the system of record) and hands them to the store with each query.
Statement texts come from constant fragments picked by validated options; values are always bound
parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import asyncpg

from storage.clickhouse import AnalyticsStore, Params
from storage.statement_timeout import own_timeout

PERIOD_SECONDS = {"day": 86_400, "week": 604_800}
_TRUNC = {
    "hour": "toUnixTimestamp(toStartOfHour({t}))",
    "day": "toUnixTimestamp(toStartOfDay({t}))",
    "week": "toUnixTimestamp(toDateTime(toMonday({t}), 'UTC'))",
}
_STEP = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
_TS = "DateTime64(6, 'UTC')"
_NEVER = "9223372036854775807"  # a funnel step never reached: later than any microsecond time
# An event's place in time order with ties broken by the lower event id (bytewise; storage/ids.py makes ids in
# order), as one string: the time as 8 big-endian bytes (microseconds since 1900, DateTime64's least time, so
# never negative and sorting bytewise), then the id. By ts alone, argMin took whichever tied row the store
# read first, which depends on how the rows lie in parts. As argMin's key (2M events) the (ts, id) tuple took
# about 4.5x the time of ts alone, this string about 1.9x (docs/benchmarks.md, "A tie of funnel entries").
_TIME_THEN_ID = ("concat(reverse(reinterpretAsFixedString(toUInt64(toUnixTimestamp64Micro(ts) "
                 "+ 2208988800000000))), id)")


def truncate(moment: datetime, interval: str) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if interval == "hour":
        return moment
    moment = moment.replace(hour=0)
    return moment - timedelta(days=moment.weekday()) if interval == "week" else moment


def _epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def property_expr(b: Params, path: Sequence[str], column: str = "properties") -> str:
    """The event property at `path` (of the JSON text in `column`) as PostgreSQL's `#>>` renders it: strings
    bare, other JSON values as their JSON text, NULL when absent or null."""
    # One parse per event: JSONExtract as Nullable(String) gives a string's value, any other value's JSON
    # text and NULL for null or absent (multiIf over JSONType, JSONExtractString and JSONExtractRaw took
    # 1.6x as long, parsing each event twice).
    return f"JSONExtract({column}, {', '.join(b(k) for k in path)}, 'Nullable(String)')"


def _scope(b: Params, store: AnalyticsStore, workspace_id: int, env: str, *, final: bool = True) -> str:
    """The keyed events of one workspace/env. FINAL collapses the copies of an event a retried mirror batch
    inserted; reads whose answer no copy can change (min, existence, distinct pairs) skip its cost."""
    return (f"{store.table('keyed_events')}{' FINAL' if final else ''} WHERE workspace_id = "
            f"{b(workspace_id, 'UInt64')} AND env = {b(env)}")


_SEP = "\x00"  # PostgreSQL text cannot hold NUL, so no user id contains it

# The users who have the trait, as TraitIndex hands them to ClickHouse, built by PostgreSQL: the distinct values
# in code-point order (COLLATE "C", as Python sorts strings), the user ids joined by NUL (a bytea: text cannot
# hold it) and each one's value number (1 + its place in the values) joined by commas, in the same order (the
# two aggregates take the same rows one by one). Built in the process from a row per user, this held the event
# loop for ~0.1 s at 50,000 users and ~3.6 s at a million (bench/trait_groups.py). $4: whether user ids
# starting with "anon:" count; the last column says whether any did.
_TRAITS = (
    "WITH labels AS (SELECT v, row_number() OVER (ORDER BY v COLLATE \"C\") AS n FROM ("
    "SELECT DISTINCT traits #>> $3::text[] AS v FROM user_profiles "
    "WHERE workspace_id = $1 AND env = $2 AND ($4 OR user_id NOT LIKE 'anon:%')) d WHERE v IS NOT NULL) "
    "SELECT (SELECT coalesce(array_agg(v ORDER BY n), '{}') FROM labels), "
    "string_agg(convert_to(p.user_id, 'UTF8'), '\\x00'::bytea), string_agg(l.n::text, ','), "
    "coalesce(bool_or(p.user_id LIKE 'anon:%'), false) "
    "FROM user_profiles p JOIN labels l ON l.v = p.traits #>> $3::text[] "
    "WHERE p.workspace_id = $1 AND p.env = $2 AND ($4 OR p.user_id NOT LIKE 'anon:%')"
)


class TraitIndex:
    """Users' trait values as ClickHouse sees them: `expr` is each row's value number (1 + its place in
    `labels`), 0 for users without one; grouping by a small number and naming the groups here took half the
    time of grouping by the value's string at 10M events.

    The users and their numbers go to ClickHouse as two lists that transform() looks up in a hash table, so a
    grouping stays (bucket, event, value) however many users there are. Each list is one string split on the
    ClickHouse side: a string parameter parses in one go, an Array(String) of 50,000 users took ~60 ms. Rows
    are matched by actor_key, the hash of each user id (storage/clickhouse_schema.py ACTOR_KEY; a user id is
    never ''), which is faster than by the user_id string. The trait goes by the event's user_id, and an
    anonymous actor "anon:x" has the key of a user id "anon:x": when such a user has the trait, the string is
    matched instead."""

    def __init__(self, b: Params, labels: list[str], users: str, numbers: str, *, by_user_id: bool) -> None:
        self.labels = labels
        if not labels:
            self.expr = "toUInt32(0)"
            return
        users_expr = f"splitByChar({b(_SEP)}, {b(users)})"
        if not by_user_id:
            users_expr = f"arrayMap(u -> cityHash64(u), {users_expr})"
        numbers_expr = f"arrayMap(x -> toUInt32(x), splitByChar(',', {b(numbers)}))"
        self.expr = (f"transform({'user_id' if by_user_id else 'actor_key'}, {users_expr}, {numbers_expr}, "
                     "toUInt32(0))")

    def label(self, n: int) -> str | None:
        return self.labels[n - 1] if n else None


async def trait_index(conn: asyncpg.Connection, b: Params, workspace_id: int, env: str, path: list[str], *,
                      anonymous_names: bool, pg_seconds: float | None = None) -> TraitIndex:
    """The index of the users who have the trait at `path`; without `anonymous_names`, user ids starting with
    "anon:" are left out (a funnel's actors "anon:x" are anonymous ids, which no user's trait names). With
    `pg_seconds`, PostgreSQL's own timeout for the read, and a stall past it PostgresStalled
    (storage/statement_timeout.py)."""
    args = (workspace_id, env, path, anonymous_names)
    if pg_seconds is None:
        row = await conn.fetchrow(_TRAITS, *args)
    else:
        async with own_timeout(conn, pg_seconds) as bound:
            row = await conn.fetchrow(_TRAITS, *args, timeout=bound)
    labels, users, numbers, anonymous = row
    return TraitIndex(b, list(labels), (users or b"").decode(), numbers or "", by_user_id=anonymous)


def _ratio(part: int, whole: int | None) -> float | None:
    if not whole:
        return None
    return float((Decimal(part) / Decimal(whole)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


# --- event volume -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class VolumeRow:
    bucket: datetime
    event: str
    grp: str | None
    n: int


OTHER = "(other)"  # the group the groups past a report's group_limit are folded into, as dashboard charts name it


@dataclass(frozen=True, slots=True)
class Volume:
    rows: list[VolumeRow]
    other_groups: int  # distinct group values folded into OTHER (0 when every group is kept, or ungrouped)


async def event_volume(
    store: AnalyticsStore, conn: asyncpg.Connection, workspace_id: int, env: str, *, events: list[str],
    start: datetime, end: datetime, interval: str, group_kind: str | None, group_path: list[str],
    group_limit: int | None = None, settings: dict | None = None, pg_seconds: float | None = None,
) -> Volume:
    """Every bucket from start to end for each event (zeros included); with a grouping, each
    (event, group) pair that occurs, and an event with no group in the range has the null group (0 in
    every bucket), so grouped rows cover the buckets and events ungrouped ones do. With `group_limit`, the
    groups past the largest that many (by their count over the window and all `events`, ties by value) are
    summed into OTHER per bucket and event, so the counts still add up; the null group is kept apart.
    `pg_seconds`: PostgreSQL's timeout for a trait's users (trait_index)."""
    b = Params()
    scope = _scope(b, store, workspace_id, env)
    if group_kind == "properties":
        grp = property_expr(b, group_path)
    elif group_kind == "traits":
        index = await trait_index(conn, b, workspace_id, env, group_path, anonymous_names=True,
                                  pg_seconds=pg_seconds)
        grp = f"nullIf({index.expr}, 0)"
    else:
        grp = "NULL"
    counts_sql = (
        f"SELECT {_TRUNC[interval].format(t='ts')} AS bucket, name, {grp} AS grp, count() AS c FROM {scope} "
        f"AND name IN {b(events, 'Array(String)')} AND ts >= {b(start, _TS)} AND ts <= {b(end, _TS)} "
        "GROUP BY bucket, name, grp")
    folded = 0
    if group_kind and group_limit is not None:
        label = index.label if group_kind == "traits" else (lambda g: g)
        rows, folded = await _capped(store, b, counts_sql, ("bucket", "name"), group_limit, label, settings)
    else:
        rows = await store.query(counts_sql, b.params, settings=settings)
        if group_kind == "traits":
            rows = [(bucket, name, index.label(g or 0), n) for bucket, name, g, n in rows]
    counts: dict[tuple, int] = {}
    for bucket, name, g, n in rows:
        key = (_epoch(bucket), name, g)
        counts[key] = counts.get(key, 0) + n
    keys = {(e, g) for _, e, g in counts} if group_kind else set()
    named = {e for e, _ in keys}
    keys |= {(e, None) for e in events if e not in named}
    # Named groups by value, then the fold, then the null group.
    keys = sorted(keys, key=lambda k: (k[0], k[1] is None, folded > 0 and k[1] == OTHER, k[1] or ""))
    out, at, step = [], truncate(start, interval), _STEP[interval]
    while at <= end:
        out.extend(VolumeRow(at, e, g, counts.get((at, e, g), 0)) for e, g in keys)
        at += step
    return Volume(out, folded)


async def _capped(store: AnalyticsStore, b: Params, counts_sql: str, by: tuple[str, ...], limit: int,
                  label: Callable[[Any], str | None], settings: dict | None) -> tuple[list[tuple], int]:
    """`counts_sql`'s counts (columns *by, grp, c) with the groups past the largest `limit` (by their total over
    every `by`, ties by value) summed into OTHER: rows (*by, label, count) and how many values the fold holds.
    The cap is applied in the store, so at most (limit + 2) groups per `by` are read back: each group's rank
    among the non-null ones, the ranks past the limit as one group (k = 0; the null group is k = -1, kept
    apart). max(r) over the folded rows is the number of non-null groups. `by` is constant column names."""
    cols = ", ".join(by)
    ranked = (f"SELECT {cols}, grp, c, dense_rank() OVER (ORDER BY isNull(grp), t DESC, grp) AS r "
              f"FROM (SELECT {cols}, grp, c, sum(c) OVER (PARTITION BY grp) AS t FROM ({counts_sql}))")
    rows = await store.query(
        f"SELECT {cols}, multiIf(isNull(grp), -1, r <= {b(limit, 'UInt32')}, toInt64(r), 0) AS k, "
        f"any(grp), max(r), sum(c) FROM ({ranked}) GROUP BY {cols}, k", b.params, settings=settings)
    at = len(by)  # k, grp, max(r), sum(c) follow the `by` columns
    folded = max(0, max((row[at + 2] for row in rows if row[at] == 0), default=0) - limit)
    out, merged = [], False
    for row in rows:
        k = row[at]
        name = None if k < 0 else OTHER if k == 0 else label(row[at + 1])
        merged |= k > 0 and name == OTHER and folded > 0  # a value named OTHER joins the fold, as in charts
        out.append((*row[:at], name, row[at + 3]))
    return out, folded + merged


# --- funnel -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FunnelRow:
    step: int
    event: str
    grp: str | None
    users: int
    from_first: float | None
    from_previous: float | None


@dataclass(frozen=True, slots=True)
class Funnel:
    rows: list[FunnelRow]
    other_groups: int  # distinct group values folded into OTHER (0 when every group is kept, or ungrouped)


async def funnel(
    store: AnalyticsStore, conn: asyncpg.Connection, workspace_id: int, env: str, *, events: list[str],
    start: datetime, end: datetime, window_days: int, group_kind: str | None, group_path: list[str],
    group_limit: int | None = None, settings: dict | None = None, pg_seconds: float | None = None,
) -> Funnel:
    """Actors enter at their first step-1 event in [start, end]; step k is their earliest step-k event
    after step k-1 and within window_days of the entry. Rows per group and step; an actor is in one group (its
    entry event's property, or its user's trait). With `group_limit`, the groups past the largest that many (by
    the actors entering step 1, ties by value) are summed into OTHER per step, so the steps still add up to the
    ungrouped funnel's; the null group is kept apart. `pg_seconds`: PostgreSQL's timeout for a trait's users
    (trait_index)."""
    b = Params()
    hi = b(end, _TS)
    first = b(events[0])
    window = b(window_days * 86_400_000_000, "Int64")
    # Per actor (by its key), from two scans joined on it: the entry (the first step-1 event in [start, end])
    # with its properties when grouping by one (parsed below once per actor, not once per event), and one
    # array of times per name of a later step. Times are microseconds since the epoch. Of step-1 events at one
    # instant, the entry is the one with the lower id (the same actor's properties whatever the part order).
    props = f", argMin(properties, {_TIME_THEN_ID}) AS entry_properties" if group_kind == "properties" else ""
    entries = (f"SELECT actor_key, toUnixTimestamp64Micro(min(ts)) AS t1{props} "
               f"FROM {_scope(b, store, workspace_id, env, final=False)} AND name = {first} "
               f"AND ts >= {b(start, _TS)} AND ts <= {hi} AND actor_key != 0 GROUP BY actor_key")
    names = list(dict.fromkeys(events[1:]))
    arrays = ", ".join(f"groupArrayIf(toUnixTimestamp64Micro(ts), name = {b(n)}) AS s{i}"
                       for i, n in enumerate(names))
    later = (f"SELECT actor_key, {arrays} FROM {_scope(b, store, workspace_id, env, final=False)} "
             f"AND name IN {b(names, 'Array(String)')} AND ts >= {b(start, _TS)} "
             f"AND ts <= {hi} + toIntervalMicrosecond({window}) AND actor_key != 0 GROUP BY actor_key")
    columns = ", ".join(["e.actor_key AS actor_key", "t1", *(["entry_properties"] if props else []),
                         *(f"s{i}" for i in range(len(names)))])
    per_actor = (f"SELECT {columns} FROM ({entries}) AS e LEFT JOIN ({later}) AS l "
                 "ON l.actor_key = e.actor_key")
    # Step k: the least time in its name's array after step k-1 and at most the window past the entry;
    # NEVER (beyond any time) when there is none, which leaves every later step unreached too.
    deadline = f"t1 + {window}"
    steps = []
    for k in range(2, len(events) + 1):
        cand = f"arrayFilter(x -> x > t{k - 1} AND x <= {deadline}, s{names.index(events[k - 1])})"
        steps.append(f"if(empty({cand}), {_NEVER}, arrayMin({cand})) AS t{k}")
    level = "1 + " + " + ".join(f"(t{k} < {_NEVER})" for k in range(2, len(events) + 1))
    leveled = f"SELECT *, {', '.join(steps)}, {level} AS level FROM ({per_actor})"
    index = None
    if group_kind == "traits":  # actors "anon:…" are anonymous ids: they get no user's trait, as before
        index = await trait_index(conn, b, workspace_id, env, group_path, anonymous_names=False,
                                  pg_seconds=pg_seconds)
        grp = f"nullIf({index.expr}, 0)"
    elif group_kind == "properties":
        grp = property_expr(b, group_path, "entry_properties")
    else:
        grp = "NULL"
    counts_sql = f"SELECT {grp} AS grp, level, count() AS c FROM ({leveled}) GROUP BY grp, level"
    folded = 0
    if group_kind and group_limit is not None:
        # Each group's actors entering step 1 rank it (every level counts them). An actor is in one group, so the
        # fold's levels are its groups' levels summed, and so are the steps made of them.
        rows, folded = await _capped(store, b, counts_sql, ("level",), group_limit,
                                     index.label if index else (lambda g: g), settings)
        counted = [(g, level, n) for level, g, n in rows]
    else:
        rows = await store.query(counts_sql, b.params, settings=settings)
        counted = [(index.label(g or 0) if index else g, level, n) for g, level, n in rows]
    levels: dict[str | None, list[int]] = {}
    for g, level, n in counted:
        per = levels.setdefault(g, [0] * len(events))
        for k in range(level):
            per[k] += n
    # Every step has a row: ungrouped always, grouped when no user entered at all (the null group, 0), as
    # grouped event volume keeps its buckets, so a chart client still has the steps to draw.
    if not levels or (not group_kind and None not in levels):
        levels[None] = [0] * len(events)
    out = []
    # Named groups by value, then the fold, then the null group.
    for g in sorted(levels, key=lambda g: (g is None, folded > 0 and g == OTHER, g or "")):
        users = levels[g]
        for k, n in enumerate(users):
            prev = users[k - 1] if k else n
            out.append(FunnelRow(k + 1, events[k], g, n, _ratio(n, users[0]), _ratio(n, prev)))
    return Funnel(out, folded)


# --- retention --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RetentionRow:
    cohort: datetime
    users: int
    shares: list[float | None]


async def retention(
    store: AnalyticsStore, workspace_id: int, env: str, *, start_event: str, return_event: str,
    start: datetime, end: datetime, period: str, periods: int, now: datetime, settings: dict | None = None,
) -> list[RetentionRow]:
    """Cohorts by the period of each actor's first start event (which must fall in [start, end]); a share
    is the part of the cohort with a return event k periods later, NULL while that period has not begun."""
    b = Params()
    seconds = PERIOD_SECONDS[period]
    trunc = _TRUNC[period]
    # Every part of this is unchanged by a copy of an event (a first time, distinct periods), so it reads
    # without FINAL. Per actor: the cohort, and the distinct periods of its returns in the reachable range.
    cohorts = (f"SELECT actor_key, {trunc.format(t='min(ts)')} AS cohort "
               f"FROM {_scope(b, store, workspace_id, env, final=False)} "
               f"AND name = {b(start_event)} AND ts <= {b(end, _TS)} AND actor_key != 0 "
               f"GROUP BY actor_key HAVING min(ts) >= {b(start, _TS)}")
    lo = truncate(start, period) + timedelta(seconds=seconds)
    hi = truncate(end, period) + (periods + 1) * timedelta(seconds=seconds)
    returns = (f"SELECT actor_key, groupUniqArray({trunc.format(t='ts')}) AS buckets "
               f"FROM {_scope(b, store, workspace_id, env, final=False)} AND name = {b(return_event)} "
               f"AND ts >= {b(lo, _TS)} AND ts < {b(hi, _TS)} AND actor_key != 0 GROUP BY actor_key")
    # One row per cohort member for k = 0 (the cohort's size) and per period k in 1..periods it returned in.
    ks = (f"arrayFilter(k -> k >= 1 AND k <= {b(periods, 'Int64')}, "
          f"arrayMap(x -> intDiv(toInt64(x) - toInt64(c.cohort), {b(seconds, 'Int64')}), r.buckets))")
    rows = await store.query(
        f"SELECT c.cohort AS cohort, k, count() FROM ({cohorts}) AS c LEFT JOIN ({returns}) AS r "
        f"ON r.actor_key = c.actor_key ARRAY JOIN arrayPushFront({ks}, 0) AS k GROUP BY cohort, k",
        b.params, settings=settings)
    sizes = [(c, n) for c, k, n in rows if k == 0]
    returned = {(c, k): n for c, k, n in rows}
    out = []
    for cohort, users in sorted(sizes):
        at = _epoch(cohort)
        shares = [None if at + k * timedelta(seconds=seconds) > now else _ratio(returned.get((cohort, k), 0), users)
                  for k in range(1, periods + 1)]
        out.append(RetentionRow(at, users, shares))
    return out
