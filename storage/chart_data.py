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


def _group_name(group: str | None, grouped: bool, event: str) -> str:
    if not grouped:
        return event
    return NONE if group is None else group


def _top_groups(totals: dict[str, int]) -> tuple[list[str], set[str]]:
    ranked = sorted(totals, key=lambda g: (-totals[g], g))
    return ranked[:MAX_GROUPS], set(ranked[MAX_GROUPS:])


async def time_series(
    store: AnalyticsStore, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime, interval: str,
) -> list[Series]:
    """Per-bucket counts, one series per group_by value (top MAX_GROUPS, the rest as OTHER); every bucket
    of the range appears, zero when empty. Without group_by: one series named after the event."""
    b = Params()
    sql = (f"SELECT {_BUCKET[interval]} AS bucket, {_grp(b, chart)} AS grp, count() "
           f"{_base(b, store, workspace_id, env, start, end)} AND name = {b(chart['event'])}"
           f"{filter_sql(b, chart['filters'])} GROUP BY bucket, grp")
    grouped = chart["group_by"] is not None
    counts: dict[str, dict[datetime, int]] = {}
    for epoch, grp, n in await store.query(sql, b.params):
        bucket = datetime.fromtimestamp(epoch, UTC)
        per_bucket = counts.setdefault(_group_name(grp, grouped, chart["event"]), {})
        per_bucket[bucket] = per_bucket.get(bucket, 0) + n
    if not grouped and not counts:
        counts[chart["event"]] = {}
    top, rest = _top_groups({g: sum(c.values()) for g, c in counts.items()})
    if rest:
        other: dict[datetime, int] = counts.pop(OTHER) if OTHER in top else {}
        for group in rest:
            for bucket, n in counts[group].items():
                other[bucket] = other.get(bucket, 0) + n
        counts[OTHER] = other
        top = [g for g in top if g != OTHER] + [OTHER]
    stamps = buckets(start, end, interval)
    return [Series(g, [(b, counts[g].get(b, 0)) for b in stamps]) for g in top]


async def grouped_totals(
    store: AnalyticsStore, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime,
) -> list[tuple[str, int]]:
    """(group, count) over the whole range, largest first; the rest beyond MAX_GROUPS as OTHER."""
    b = Params()
    sql = (f"SELECT {_grp(b, chart)} AS grp, count() {_base(b, store, workspace_id, env, start, end)} "
           f"AND name = {b(chart['event'])}{filter_sql(b, chart['filters'])} GROUP BY grp")
    grouped = chart["group_by"] is not None
    totals: dict[str, int] = {}
    for grp, n in await store.query(sql, b.params):
        name = _group_name(grp, grouped, chart["event"])
        totals[name] = totals.get(name, 0) + n
    if not grouped and not totals:
        totals[chart["event"]] = 0
    top, rest = _top_groups(totals)
    out = [(g, totals[g]) for g in top if not (rest and g == OTHER)]
    if rest:
        out.append((OTHER, sum(totals[g] for g in rest) + (totals.get(OTHER, 0) if OTHER in top else 0)))
    return out


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
