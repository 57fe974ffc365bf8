"""The baseline of bench/reports.py: the built-in report types as they ran on PostgreSQL before the
analytics engine (storage/report_queries.py before migration 0017), kept verbatim to time against.

Set-based SQL over the events table's (workspace_id, env, name, ts) index.

Only keyed events count (site_id IS NULL). A report's actor is the user_id, or the anonymous_id for
events without one (prefixed so the two never collide). Every statement text is assembled from
constant fragments picked by validated options (grouping kind, number of funnel steps); values are
always bound parameters. Callers run these inside `scoped_run()` (UTC, read only, statement timeout).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

import asyncpg

ACTOR = "COALESCE(e.user_id, 'anon:' || e.anonymous_id)"
KEYED = "e.workspace_id = $1 AND e.env = $2 AND e.site_id IS NULL"
PROFILE_JOIN = (
    "LEFT JOIN user_profiles u ON u.workspace_id = $1 AND u.env = $2 AND u.user_id = {actor}"
)
# Grouping expressions; $G is replaced by the number of the bound text[] path parameter.
GROUP_EXPR = {None: "NULL::text", "properties": "e.properties #>> $G::text[]", "traits": "u.traits #>> $G::text[]"}


@asynccontextmanager
async def scoped_run(conn: asyncpg.Connection, timeout_ms: int) -> AsyncIterator[asyncpg.Connection]:
    """A read-only transaction in UTC whose statements are cancelled after timeout_ms."""
    async with conn.transaction(readonly=True):
        await conn.execute(
            "SELECT set_config('statement_timeout', $1, true), set_config('TimeZone', 'UTC', true)",
            str(max(1, timeout_ms)),
        )
        yield conn


def _group(kind: str | None, param: int) -> str:
    return GROUP_EXPR[kind].replace("$G", f"${param}")


async def event_volume(
    conn: asyncpg.Connection, workspace_id: int, env: str, *, events: list[str], start: datetime,
    end: datetime, interval: str, group_kind: str | None, group_path: list[str],
) -> list[asyncpg.Record]:
    """Rows (bucket, event, grp, n): every bucket from start to end for each event (zeros included);
    with a grouping, each (event, group) pair that occurs."""
    join = PROFILE_JOIN.format(actor="e.user_id") if group_kind == "traits" else ""
    keys = ("SELECT DISTINCT event, grp FROM c" if group_kind
            else "SELECT unnest($3::text[]) AS event, NULL::text AS grp")
    sql = f"""
    WITH c AS (
        SELECT date_trunc($6, e.ts) AS bucket, e.name AS event, {_group(group_kind, 7)} AS grp, count(*) AS n
        FROM events e {join}
        WHERE {KEYED} AND e.name = ANY($3::text[]) AND e.ts >= $4 AND e.ts <= $5
        GROUP BY 1, 2, 3
    ), k AS ({keys})
    SELECT s.bucket, k.event, k.grp, COALESCE(c.n, 0) AS n
    FROM generate_series(date_trunc($6, $4::timestamptz), $5::timestamptz, ('1 ' || $6)::interval) AS s(bucket)
    CROSS JOIN k
    LEFT JOIN c ON c.bucket = s.bucket AND c.event = k.event AND c.grp IS NOT DISTINCT FROM k.grp
    ORDER BY s.bucket, k.event, k.grp NULLS LAST
    """
    args: list[object] = [workspace_id, env, events, start, end, interval]
    if group_kind:
        args.append(group_path)
    return await conn.fetch(sql, *args)


def _funnel_sql(steps: int, group_kind: str | None) -> str:
    grp = _group("properties", 7) if group_kind == "properties" else "NULL::text"
    ctes = [f"""ev AS MATERIALIZED (
        SELECT {ACTOR} AS actor, e.name, e.ts, {grp} AS grp FROM events e
        WHERE {KEYED} AND e.name = ANY($3::text[]) AND e.ts >= $4 AND e.ts <= $5::timestamptz + $6::interval
          AND (e.user_id IS NOT NULL OR e.anonymous_id IS NOT NULL)
    )""", """f1 AS (
        SELECT DISTINCT ON (actor) actor, grp, ts AS t1 FROM ev
        WHERE name = ($3::text[])[1] AND ts <= $5 ORDER BY actor, ts
    )"""]
    # Step k: the earliest step-k event after step k-1, within the window opened by step 1.
    for k in range(2, steps + 1):
        carried = ", ".join(f"f.t{i}" for i in range(1, k))
        ctes.append(f"""f{k} AS (
        SELECT f.actor, f.grp, {carried}, min(ev.ts) AS t{k} FROM f{k - 1} f
        LEFT JOIN ev ON f.t{k - 1} IS NOT NULL AND ev.actor = f.actor AND ev.name = ($3::text[])[{k}]
             AND ev.ts > f.t{k - 1} AND ev.ts <= f.t1 + $6::interval
        GROUP BY f.actor, f.grp, {carried}
    )""")
    counts = ", ".join(f"count(f.t{i}) AS c{i}" for i in range(1, steps + 1))
    values = ", ".join(f"({i}, c.c{i})" for i in range(1, steps + 1))
    if group_kind == "traits":
        source = f"f{steps} f {PROFILE_JOIN.format(actor='f.actor')}"
        counted = f"SELECT {_group('traits', 7)} AS grp, {counts} FROM {source} GROUP BY 1"
    elif group_kind == "properties":
        counted = f"SELECT f.grp, {counts} FROM f{steps} f GROUP BY 1"
    else:  # no GROUP BY: one row even when nobody entered the funnel
        counted = f"SELECT NULL::text AS grp, {counts} FROM f{steps} f"
    return f"""
    WITH {", ".join(ctes)},
    counts AS ({counted}),
    steps AS (
        SELECT c.grp, s.step, s.users FROM counts c CROSS JOIN LATERAL (VALUES {values}) AS s(step, users)
    )
    SELECT step, ($3::text[])[step] AS event, grp, users,
           round(users::numeric / NULLIF(first_value(users) OVER w, 0), 4)::float8 AS from_first,
           round(users::numeric / NULLIF(COALESCE(lag(users) OVER w, users), 0), 4)::float8 AS from_previous
    FROM steps
    WINDOW w AS (PARTITION BY grp ORDER BY step)
    ORDER BY grp NULLS LAST, step
    """


async def funnel(
    conn: asyncpg.Connection, workspace_id: int, env: str, *, events: list[str], start: datetime,
    end: datetime, window_days: int, group_kind: str | None, group_path: list[str],
) -> list[asyncpg.Record]:
    """Rows (step, event, grp, users, from_first, from_previous) per group and step."""
    args: list[object] = [workspace_id, env, events, start, end, timedelta(days=window_days)]
    if group_kind:
        args.append(group_path)
    return await conn.fetch(_funnel_sql(len(events), group_kind), *args)


RETENTION = f"""
WITH starts AS (
    SELECT {ACTOR} AS actor, min(e.ts) AS first_ts FROM events e
    WHERE {KEYED} AND e.name = $3 AND e.ts <= $6 AND (e.user_id IS NOT NULL OR e.anonymous_id IS NOT NULL)
    GROUP BY 1 HAVING min(e.ts) >= $5
), cohorts AS (
    SELECT actor, date_trunc($7, first_ts) AS cohort FROM starts
), returns AS (
    SELECT DISTINCT c.cohort, c.actor,
           floor(extract(epoch FROM date_trunc($7, e.ts) - c.cohort) / $8)::int AS k
    FROM events e JOIN cohorts c ON c.actor = {ACTOR}
    WHERE {KEYED} AND e.name = $4
      AND e.ts >= date_trunc($7, $5::timestamptz) + $9::interval
      AND e.ts < date_trunc($7, $6::timestamptz) + ($10 + 1) * $9::interval
      AND e.ts >= c.cohort + $9::interval AND e.ts < c.cohort + ($10 + 1) * $9::interval
), sizes AS (
    SELECT cohort, count(*) AS users FROM cohorts GROUP BY cohort
), returned AS (
    SELECT cohort, k, count(*) AS n FROM returns GROUP BY cohort, k
)
SELECT s.cohort, s.users,
       array_agg(CASE WHEN s.cohort + g.k * $9::interval > $11 THEN NULL
                      ELSE round(COALESCE(r.n, 0)::numeric / s.users, 4)::float8 END ORDER BY g.k) AS shares
FROM sizes s CROSS JOIN generate_series(1, $10) AS g(k)
LEFT JOIN returned r ON r.cohort = s.cohort AND r.k = g.k
GROUP BY s.cohort, s.users
ORDER BY s.cohort
"""
PERIOD_SECONDS = {"day": 86_400, "week": 604_800}


async def retention(
    conn: asyncpg.Connection, workspace_id: int, env: str, *, start_event: str, return_event: str,
    start: datetime, end: datetime, period: str, periods: int, now: datetime,
) -> list[asyncpg.Record]:
    """Rows (cohort, users, shares[1..periods]); a share is NULL while its period has not begun."""
    return await conn.fetch(
        RETENTION, workspace_id, env, start_event, return_event, start, end, period,
        PERIOD_SECONDS[period], timedelta(seconds=PERIOD_SECONDS[period]), periods, now,
    )
