"""Keyed-API dashboards and their charts. Every read and write is scoped by workspace and env; chart
statements reach a chart only through a dashboard of the caller's workspace and env."""

from __future__ import annotations

from typing import Any

import asyncpg

DASHBOARD_COLUMNS = "d.id, d.name, d.description, d.public_token, d.created_at, d.updated_at"
CHART_COLUMNS = "c.id, c.dashboard_id, c.title, c.type, c.event, c.filters, c.group_by, c.steps"

# updated_at must visibly move on every change, even two changes within one millisecond.
_BUMP = "updated_at = GREATEST(clock_timestamp(), d.updated_at + interval '1 millisecond')"

LIST = f"""
SELECT {DASHBOARD_COLUMNS},
       (SELECT count(*) FROM dashboard_charts c WHERE c.dashboard_id = d.id) AS chart_count
FROM dashboards d
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id > $3
ORDER BY d.id
LIMIT $4
"""

GET = f"SELECT {DASHBOARD_COLUMNS} FROM dashboards d WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3"

INSERT = """
INSERT INTO dashboards AS d (id, workspace_id, env, name, description) VALUES ($1, $2, $3, $4, $5)
"""

# $4/$6 say whether name/description are being changed, so one statement serves every PATCH.
UPDATE = f"""
UPDATE dashboards AS d
SET name = CASE WHEN $4 THEN $5 ELSE d.name END,
    description = CASE WHEN $6 THEN $7 ELSE d.description END,
    {_BUMP}
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3
RETURNING {DASHBOARD_COLUMNS}
"""

TOUCH = f"""
UPDATE dashboards AS d SET {_BUMP}
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3
RETURNING d.id
"""

DELETE = "DELETE FROM dashboards WHERE workspace_id = $1 AND env = $2 AND id = $3"

# Sharing an already shared dashboard keeps its token (and its updated_at); unsharing forgets it.
SHARE = f"""
UPDATE dashboards AS d
SET public_token = COALESCE(d.public_token, $4),
    updated_at = CASE WHEN d.public_token IS NULL
                      THEN GREATEST(clock_timestamp(), d.updated_at + interval '1 millisecond')
                      ELSE d.updated_at END
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3
RETURNING {DASHBOARD_COLUMNS}
"""

UNSHARE = f"""
UPDATE dashboards AS d
SET public_token = NULL,
    updated_at = CASE WHEN d.public_token IS NOT NULL
                      THEN GREATEST(clock_timestamp(), d.updated_at + interval '1 millisecond')
                      ELSE d.updated_at END
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3
RETURNING {DASHBOARD_COLUMNS}
"""

BY_TOKEN = f"""
SELECT {DASHBOARD_COLUMNS}, d.workspace_id, d.env FROM dashboards d WHERE d.public_token = $1
"""

CHARTS = f"SELECT {CHART_COLUMNS} FROM dashboard_charts c WHERE c.dashboard_id = $1 ORDER BY c.position, c.id"

GET_CHART = f"""
SELECT {CHART_COLUMNS} FROM dashboard_charts c JOIN dashboards d ON d.id = c.dashboard_id
WHERE d.workspace_id = $1 AND d.env = $2 AND d.id = $3 AND c.id = $4
"""

INSERT_CHART = f"""
INSERT INTO dashboard_charts AS c (id, dashboard_id, position, title, type, event, filters, group_by, steps)
VALUES ($1, $2,
        (SELECT COALESCE(max(position), 0) + 1 FROM dashboard_charts WHERE dashboard_id = $2),
        $3, $4, $5, $6, $7, $8)
RETURNING {CHART_COLUMNS}
"""

UPDATE_CHART = f"""
UPDATE dashboard_charts AS c
SET title = $3, type = $4, event = $5, filters = $6, group_by = $7, steps = $8
WHERE c.dashboard_id = $1 AND c.id = $2
RETURNING {CHART_COLUMNS}
"""

DELETE_CHART = "DELETE FROM dashboard_charts WHERE dashboard_id = $1 AND id = $2"

COUNT_CHARTS = "SELECT count(*) FROM dashboard_charts WHERE dashboard_id = $1"


def _chart_args(chart: dict[str, Any]) -> tuple:
    return (chart["title"], chart["type"], chart["event"], chart["filters"], chart["group_by"], chart["steps"])


async def list_dashboards(
    conn: asyncpg.Connection, workspace_id: int, env: str, *, after_id: str, limit: int
) -> list[asyncpg.Record]:
    return await conn.fetch(LIST, workspace_id, env, after_id, limit)


async def get_dashboard(conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str):
    return await conn.fetchrow(GET, workspace_id, env, dashboard_id)


async def charts_of(conn: asyncpg.Connection, dashboard_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(CHARTS, dashboard_id)


async def create_dashboard(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, *,
    name: str, description: str | None, charts: list[tuple[str, dict[str, Any]]],
) -> None:
    """charts: (chart id, chart fields) in display order."""
    async with conn.transaction():
        await conn.execute(INSERT, dashboard_id, workspace_id, env, name, description)
        for chart_id, chart in charts:
            await conn.execute(INSERT_CHART, chart_id, dashboard_id, *_chart_args(chart))


async def update_dashboard(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, *,
    changes: dict[str, Any],
):
    return await conn.fetchrow(
        UPDATE, workspace_id, env, dashboard_id,
        "name" in changes, changes.get("name"), "description" in changes, changes.get("description"),
    )


async def delete_dashboard(conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str) -> bool:
    return await conn.execute(DELETE, workspace_id, env, dashboard_id) != "DELETE 0"


async def set_public(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, token: str | None
):
    """Share with `token` (kept if already shared) or, with None, make private again."""
    if token is None:
        return await conn.fetchrow(UNSHARE, workspace_id, env, dashboard_id)
    return await conn.fetchrow(SHARE, workspace_id, env, dashboard_id, token)


async def by_token(conn: asyncpg.Connection, token: str):
    return await conn.fetchrow(BY_TOKEN, token)


async def get_chart(conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, chart_id: str):
    return await conn.fetchrow(GET_CHART, workspace_id, env, dashboard_id, chart_id)


async def add_chart(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, chart_id: str,
    chart: dict[str, Any], *, max_charts: int,
) -> asyncpg.Record | str | None:
    """Returns the new chart row, None when the dashboard is not the caller's, or "full"."""
    async with conn.transaction():
        # Touching first locks the dashboard row, which serialises position assignment.
        if await conn.fetchval(TOUCH, workspace_id, env, dashboard_id) is None:
            return None
        if await conn.fetchval(COUNT_CHARTS, dashboard_id) >= max_charts:
            return "full"
        return await conn.fetchrow(INSERT_CHART, chart_id, dashboard_id, *_chart_args(chart))


class _NoChart(Exception):
    """Raised inside a transaction so that the bump of updated_at rolls back with it."""


async def update_chart(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, chart_id: str,
    chart: dict[str, Any],
):
    try:
        async with conn.transaction():
            if await conn.fetchval(TOUCH, workspace_id, env, dashboard_id) is None:
                return None
            row = await conn.fetchrow(UPDATE_CHART, dashboard_id, chart_id, *_chart_args(chart))
            if row is None:
                raise _NoChart
            return row
    except _NoChart:
        return None


async def delete_chart(
    conn: asyncpg.Connection, workspace_id: int, env: str, dashboard_id: str, chart_id: str
) -> bool:
    try:
        async with conn.transaction():
            if await conn.fetchval(TOUCH, workspace_id, env, dashboard_id) is None:
                return False
            if await conn.execute(DELETE_CHART, dashboard_id, chart_id) == "DELETE 0":
                raise _NoChart
            return True
    except _NoChart:
        return False
