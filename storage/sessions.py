"""The sessions table: one row per visit, kept by the events trigger of migration 0010."""

from __future__ import annotations

import asyncpg


async def session_rows(conn: asyncpg.Connection, site_id: str) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM sessions WHERE site_id = $1 ORDER BY started_at, id", site_id)
