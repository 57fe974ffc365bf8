"""The numbers behind a dashboard chart: counts of its event per time bucket, grouped totals, and
funnel step conversions, over the keyed events of one workspace and env in the analytics store.

SQL text is assembled only from constant fragments and parameter names; property names, values, event
names and the interval are always bound parameters. A property reads as PostgreSQL's `->>` renders it
(storage/report_queries.property_expr)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from storage.clickhouse import AnalyticsStore, Params
from storage.report_queries import property_expr

INTERVALS: dict[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
TIME_SERIES_TYPES = frozenset({"line", "bar"})
MAX_GROUPS = 20  # further groups are summed into OTHER
OTHER = "(other)"
NONE = "(none)"  # events that lack the group_by property
_TS = "DateTime64(6, 'UTC')"
_BUCKET = {"hour": "toUnixTimestamp(toStartOfHour(ts))", "day": "toUnixTimestamp(toStartOfDay(ts))"}
# gt/lt compare numerically and only match values that read as numbers (JSON numbers or numeric strings).
_NUMERIC = r"^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$"
_FILTERS = {
    "eq": "ifNull({x} IN ({v}), 0)",
    # Events without the property count as "not equal", as in Mixpanel's "is not".
    "neq": "ifNull({x} NOT IN ({v}), 1)",
    "contains": "ifNull(positionCaseInsensitiveUTF8({x}, {v}) > 0, 0)",
    "gt": "ifNull(match({x}, {n}) AND toFloat64OrNull(trimBoth({x})) > {v}, 0)",
    "lt": "ifNull(match({x}, {n}) AND toFloat64OrNull(trimBoth({x})) < {v}, 0)",
}


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: list[tuple[datetime, int]]


def truncate(moment: datetime, interval: str) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if interval == "day" else moment


def buckets(start: datetime, end: datetime, interval: str) -> list[datetime]:
    step, first, last = INTERVALS[interval], truncate(start, interval), truncate(end, interval)
    # By index rather than stepping past `last`, which could overflow at the end of year 9999.
    return [first + i * step for i in range((last - first) // step + 1)]


def _text(value: Any) -> str:
    """A filter value as ->> renders it: strings as they are, numbers and booleans as JSON text (an integer's
    is its digits, beyond 64 bits too, which orjson refuses)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return orjson.dumps(value).decode()


def filter_sql(b: Params, filters: Sequence[Mapping[str, Any]]) -> str:
    """The AND clauses of the chart's property filters."""
    clauses = []
    for f in filters:
        op = f["operator"]
        x = property_expr(b, [f["property"]])
        if op in ("gt", "lt"):
            v, n = b(float(f["value"]), "Float64"), b(_NUMERIC)
        else:
            v, n = b(_text(f["value"])), ""
            if op in ("eq", "neq") and isinstance(f["value"], float):
                # The store writes a JSON number as its double's shortest text (10.0 as 10, 0.0000001 as 1e-7):
                # a float matches that too, so eq 10.0 finds the price sent as 10.0 (it found none).
                v += f", toString({b(f['value'], 'Float64')})"
        clauses.append(" AND " + _FILTERS[op].format(x=x, v=v, n=n))
    return "".join(clauses)


def _base(b: Params, store: AnalyticsStore, workspace_id: int, env: str, start: datetime, end: datetime) -> str:
    return (f"FROM {store.table('keyed_events')} FINAL WHERE workspace_id = {b(workspace_id, 'UInt64')} "
            f"AND env = {b(env)} AND ts >= {b(start, _TS)} AND ts <= {b(end, _TS)}")


def _grp(b: Params, chart: Mapping[str, Any]) -> str:
    return property_expr(b, [chart["group_by"]]) if chart["group_by"] is not None else "NULL"


async def _folded(store: AnalyticsStore, b: Params, counts_sql: str, by: str) -> list[tuple]:
    """`counts_sql`'s counts (columns `by`, grp, c) per group name (NONE for a null group: events lacking the
    property count with a value "(none)"), the groups past the MAX_GROUPS largest (by their total, ties by
    name) summed into OTHER in the store, so the process reads at most MAX_GROUPS + 1 groups per `by`: rows
    (`by`, name, rank, count), rank the group's (the fold's: after every kept one). A value named OTHER joins
    the fold when there is one. `by` is a constant column name."""
    ranked = (f"SELECT {by}, g, c, dense_rank() OVER (ORDER BY t DESC, g) AS r FROM ("
              f"SELECT {by}, g, c, sum(c) OVER (PARTITION BY g) AS t FROM ("
              f"SELECT {by}, ifNull(grp, {b(NONE)}) AS g, sum(c) AS c FROM ({counts_sql}) GROUP BY {by}, g))")
    kept, other = b(MAX_GROUPS, "UInt32"), b(OTHER)
    rows = await store.query(
        f"SELECT {by}, if(r <= {kept}, g, {other}) AS name, min(r), max(r) > {kept}, sum(c) "
        f"FROM ({ranked}) GROUP BY {by}, name", b.params)
    if not any(row[3] for row in rows):
        return [(at, name, rank, n) for at, name, rank, _, n in rows]
    # A kept value named OTHER and the fold are one group, drawn last.
    merged: dict[tuple, int] = {}
    ranks: dict[str, int] = {}
    for at, name, rank, _, n in rows:
        merged[(at, name)] = merged.get((at, name), 0) + n
        ranks[name] = MAX_GROUPS + 1 if name == OTHER else rank
    return [(at, name, ranks[name], n) for (at, name), n in merged.items()]


async def time_series(
    store: AnalyticsStore, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime, interval: str,
) -> list[Series]:
    """Per-bucket counts, one series per group_by value (top MAX_GROUPS, the rest as OTHER); every bucket
    of the range appears, zero when empty. Without group_by: one series named after the event."""
    b = Params()
    sql = (f"SELECT {_BUCKET[interval]} AS bucket, {_grp(b, chart)} AS grp, count() AS c "
           f"{_base(b, store, workspace_id, env, start, end)} AND name = {b(chart['event'])}"
           f"{filter_sql(b, chart['filters'])} GROUP BY bucket, grp")
    stamps = buckets(start, end, interval)
    if chart["group_by"] is None:
        counts = {datetime.fromtimestamp(epoch, UTC): n for epoch, _, n in await store.query(sql, b.params)}
        return [Series(chart["event"], [(at, counts.get(at, 0)) for at in stamps])]
    rows = await _folded(store, b, sql, "bucket")
    per_group: dict[str, dict[datetime, int]] = {}
    ranks: dict[str, int] = {}
    for epoch, name, rank, n in rows:
        per_group.setdefault(name, {})[datetime.fromtimestamp(epoch, UTC)] = n
        ranks[name] = rank
    return [Series(g, [(at, per_group[g].get(at, 0)) for at in stamps]) for g in sorted(per_group, key=ranks.get)]


async def grouped_totals(
    store: AnalyticsStore, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime,
) -> list[tuple[str, int]]:
    """(group, count) over the whole range, largest first; the rest beyond MAX_GROUPS as OTHER."""
    b = Params()
    sql = (f"SELECT 0 AS whole, {_grp(b, chart)} AS grp, count() AS c "
           f"{_base(b, store, workspace_id, env, start, end)} AND name = {b(chart['event'])}"
           f"{filter_sql(b, chart['filters'])} GROUP BY grp")
    if chart["group_by"] is None:
        return [(chart["event"], sum(n for _, _, n in await store.query(sql, b.params)))]
    rows = await _folded(store, b, sql, "whole")
    return [(name, n) for _, name, _, n in sorted(rows, key=lambda row: row[2])]


async def funnel(
    store: AnalyticsStore, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime,
) -> list[tuple[str, int]]:
    """(step event, distinct users reaching it) for the steps [event, *steps], in order, all within
    the range. A user is the report actor (user_id, else anonymous_id); filters apply to every step.
    Greedy earliest match: each step is the actor's first such event at or after the previous step, and after
    the last earlier step of the same name."""
    steps = [chart["event"], *(chart["steps"] or [])]
    b = Params()
    base = _base(b, store, workspace_id, env, start, end)
    filters = filter_sql(b, chart["filters"])
    names = b(sorted(set(steps)), "Array(String)")
    times = [f"minIf(ts, name = {b(steps[0])}) AS t0"]
    for i in range(1, len(steps)):
        # A different event may share the previous step's instant; a repeated one (a -> a, or a -> b -> a) needs
        # an occurrence later than its earlier step's, so that no event serves two steps.
        cond = f"x.1 >= t{i - 1}"
        if steps[i] in steps[:i]:
            cond += f" AND x.1 > t{i - 1 - steps[i - 1::-1].index(steps[i])}"
        cand = f"arrayMap(x -> x.1, arrayFilter(x -> x.2 = {b(steps[i])} AND {cond}, evs))"
        times.append(f"if(t{i - 1} IS NULL OR empty({cand}), NULL, arrayMin({cand})) AS t{i}")
    first = b(steps[0])
    inner = (f"SELECT actor, groupArray((ts, name)) AS evs, toNullable({times[0].removesuffix(' AS t0')}) AS t0 "
             f"{base} AND name IN {names} AND actor != ''{filters} GROUP BY actor "
             f"HAVING countIf(name = {first}) > 0")
    counts = ", ".join(f"count(t{i})" for i in range(len(steps)))
    later = ", ".join(times[1:])
    sql = f"SELECT {counts} FROM (SELECT t0{', ' + later if later else ''} FROM ({inner}))"
    row = (await store.query(sql, b.params))[0]
    return [(name, row[i]) for i, name in enumerate(steps)]
