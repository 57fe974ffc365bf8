"""The numbers behind a dashboard chart: counts of its event per time bucket, grouped totals, and
funnel step conversions, over keyed events (site_id IS NULL) of one workspace and env.

SQL text is assembled only from constant fragments and parameter numbers; property names, values,
event names and the interval are always bound parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import orjson

INTERVALS: dict[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
TIME_SERIES_TYPES = frozenset({"line", "bar"})
MAX_GROUPS = 20  # further groups are summed into OTHER
OTHER = "(other)"
NONE = "(none)"  # events that lack the group_by property

_BASE = (
    "FROM events e WHERE e.workspace_id = $1 AND e.env = $2 AND e.site_id IS NULL "
    "AND e.ts >= $3 AND e.ts <= $4"
)
# gt/lt compare numerically and only match values that read as numbers (JSON numbers or numeric strings);
# CASE keeps the cast from ever seeing a non-numeric value.
_NUMERIC = r"'^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$'"
_FILTERS = {
    "eq": "(e.properties ->> ${p}::text) = ${v}::text",
    # Events without the property count as "not equal", as in Mixpanel's "is not".
    "neq": "(e.properties ->> ${p}::text) IS DISTINCT FROM ${v}::text",
    "contains": "strpos(lower(e.properties ->> ${p}::text), lower(${v}::text)) > 0",
    "gt": f"CASE WHEN (e.properties ->> ${{p}}::text) ~ {_NUMERIC} "
          "THEN (e.properties ->> ${p}::text)::numeric > ${v}::numeric ELSE false END",
    "lt": f"CASE WHEN (e.properties ->> ${{p}}::text) ~ {_NUMERIC} "
          "THEN (e.properties ->> ${p}::text)::numeric < ${v}::numeric ELSE false END",
}

_BUCKETED = (
    "SELECT date_trunc($5::text, e.ts, 'UTC') AS bucket, e.properties ->> $6::text AS grp, count(*) AS n "
    + _BASE + " AND e.name = $7{filters} GROUP BY 1, 2"
)
_TOTALS = "SELECT e.properties ->> $5::text AS grp, count(*) AS n " + _BASE + " AND e.name = $6{filters} GROUP BY 1"

_ACTOR = "coalesce(e.user_id, e.anonymous_id)"
_FIRST_STEP = (
    "s0 AS (SELECT " + _ACTOR + " AS actor, min(e.ts) AS t " + _BASE
    + " AND e.name = ${name} AND " + _ACTOR + " IS NOT NULL{filters} GROUP BY 1)"
)
# Greedy earliest match: each step is the actor's first such event at or after the previous step.
_NEXT_STEP = (
    "s{i} AS (SELECT p.actor, min(e.ts) AS t FROM s{prev} p JOIN events e ON " + _ACTOR + " = p.actor "
    "AND e.ts {cmp} p.t WHERE e.workspace_id = $1 AND e.env = $2 AND e.site_id IS NULL "
    "AND e.ts >= $3 AND e.ts <= $4 AND e.name = ${name}{filters} GROUP BY 1)"
)


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
    """A filter value as ->> renders it: strings as they are, numbers and booleans as JSON text."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def filter_sql(filters: Sequence[Mapping[str, Any]], args: list[Any]) -> str:
    """Append each filter's property and value to args; return the matching AND clauses."""
    clauses = []
    for f in filters:
        op = f["operator"]
        value = Decimal(str(f["value"])) if op in ("gt", "lt") else _text(f["value"])
        args.extend((f["property"], value))
        clauses.append(" AND " + _FILTERS[op].format(p=len(args) - 1, v=len(args)))
    return "".join(clauses)


def _group_name(group: str | None, grouped: bool, event: str) -> str:
    if not grouped:
        return event
    return NONE if group is None else group


def _top_groups(totals: dict[str, int]) -> tuple[list[str], set[str]]:
    ranked = sorted(totals, key=lambda g: (-totals[g], g))
    return ranked[:MAX_GROUPS], set(ranked[MAX_GROUPS:])


async def time_series(
    conn: asyncpg.Connection, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime, interval: str,
) -> list[Series]:
    """Per-bucket counts, one series per group_by value (top MAX_GROUPS, the rest as OTHER); every bucket
    of the range appears, zero when empty. Without group_by: one series named after the event."""
    args: list[Any] = [workspace_id, env, start, end, interval, chart["group_by"], chart["event"]]
    sql = _BUCKETED.format(filters=filter_sql(chart["filters"], args))
    grouped = chart["group_by"] is not None
    counts: dict[str, dict[datetime, int]] = {}
    for row in await conn.fetch(sql, *args):
        per_bucket = counts.setdefault(_group_name(row["grp"], grouped, chart["event"]), {})
        per_bucket[row["bucket"]] = per_bucket.get(row["bucket"], 0) + row["n"]
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
    conn: asyncpg.Connection, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime,
) -> list[tuple[str, int]]:
    """(group, count) over the whole range, largest first; the rest beyond MAX_GROUPS as OTHER."""
    args: list[Any] = [workspace_id, env, start, end, chart["group_by"], chart["event"]]
    sql = _TOTALS.format(filters=filter_sql(chart["filters"], args))
    grouped = chart["group_by"] is not None
    totals: dict[str, int] = {}
    for row in await conn.fetch(sql, *args):
        name = _group_name(row["grp"], grouped, chart["event"])
        totals[name] = totals.get(name, 0) + row["n"]
    if not grouped and not totals:
        totals[chart["event"]] = 0
    top, rest = _top_groups(totals)
    out = [(g, totals[g]) for g in top if not (rest and g == OTHER)]
    if rest:
        out.append((OTHER, sum(totals[g] for g in rest) + (totals.get(OTHER, 0) if OTHER in top else 0)))
    return out


async def funnel(
    conn: asyncpg.Connection, workspace_id: int, env: str, chart: Mapping[str, Any],
    start: datetime, end: datetime,
) -> list[tuple[str, int]]:
    """(step event, distinct users reaching it) for the steps [event, *steps], in order, all within
    the range. A user is user_id or else anonymous_id; filters apply to every step."""
    steps = [chart["event"], *(chart["steps"] or [])]
    args: list[Any] = [workspace_id, env, start, end]
    filters = filter_sql(chart["filters"], args)
    ctes = []
    for i, name in enumerate(steps):
        args.append(name)
        if i == 0:
            ctes.append(_FIRST_STEP.format(name=len(args), filters=filters))
        else:
            # A repeated event (a -> a) needs a later occurrence; a different one may share the instant.
            cmp = ">" if name == steps[i - 1] else ">="
            ctes.append(_NEXT_STEP.format(i=i, prev=i - 1, cmp=cmp, name=len(args), filters=filters))
    counts = ", ".join(f"(SELECT count(*) FROM s{i})" for i in range(len(steps)))
    row = await conn.fetchrow("WITH " + ", ".join(ctes) + " SELECT " + counts, *args)
    return [(name, row[i]) for i, name in enumerate(steps)]
