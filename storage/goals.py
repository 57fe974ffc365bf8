"""Conversion goals of a site (migration 0014): a custom event name, or a pageview path pattern."""

from __future__ import annotations

import asyncpg

_COLUMNS = "id, site_id, goal_type, event_name, page_path, created_at"


def display_name(goal_type: str, event_name: str | None, page_path: str | None) -> str:
    """How a goal is named in the goals API, in breakdowns and in `goal==` filters (storage.site_filters)."""
    return event_name if goal_type == "event" else f"Visit {page_path}"


async def list_goals(conn: asyncpg.Connection, site_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(f"SELECT {_COLUMNS} FROM goals WHERE site_id = $1 ORDER BY created_at, id", site_id)


async def count_goals(conn: asyncpg.Connection, site_id: str) -> int:
    return await conn.fetchval("SELECT count(*) FROM goals WHERE site_id = $1", site_id)


async def find_goal(conn: asyncpg.Connection, site_id: str, goal_type: str, event_name: str | None,
                    page_path: str | None) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM goals WHERE site_id = $1 AND goal_type = $2 "
        "AND event_name IS NOT DISTINCT FROM $3 AND page_path IS NOT DISTINCT FROM $4",
        site_id, goal_type, event_name, page_path,
    )


async def create_goal(conn: asyncpg.Connection, goal_id: str, site_id: str, goal_type: str,
                      event_name: str | None, page_path: str | None) -> asyncpg.Record | None:
    """Insert the goal; None when the site already has the same one."""
    return await conn.fetchrow(
        f"""
        INSERT INTO goals (id, site_id, goal_type, event_name, page_path) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT DO NOTHING
        RETURNING {_COLUMNS}
        """,
        goal_id, site_id, goal_type, event_name, page_path,
    )


async def delete_goal(conn: asyncpg.Connection, site_id: str, goal_id: str) -> bool:
    deleted = await conn.fetchval("DELETE FROM goals WHERE site_id = $1 AND id = $2 RETURNING id", site_id, goal_id)
    return deleted is not None
