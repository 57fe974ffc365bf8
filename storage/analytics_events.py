"""The site event log and its export: stored site events of a window, newest first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg

COLUMNS = "id, name, url, path, referrer, title, viewport_w, properties, session_id, country, ts"
_WHERE = "site_id = $1 AND ts >= $2 AND ts < $3"
_NAMED = _WHERE + " AND name = $4"


def _scope(site_id: str, start: datetime, end: datetime, name: str | None) -> tuple[str, list]:
    if name is None:
        return _WHERE, [site_id, start, end]
    return _NAMED, [site_id, start, end, name]


async def list_events(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime,
                      name: str | None, limit: int, offset: int) -> list[asyncpg.Record]:
    where, args = _scope(site_id, start, end, name)
    n = len(args)
    return await conn.fetch(
        f"SELECT {COLUMNS} FROM events WHERE {where} ORDER BY ts DESC, id DESC LIMIT ${n + 1} OFFSET ${n + 2}",
        *args, limit, offset,
    )


async def stream_events(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime,
                        limit: int, prefetch: int = 500) -> AsyncIterator[asyncpg.Record]:
    """Rows through a server-side cursor; the caller holds a transaction open on conn."""
    where, args = _scope(site_id, start, end, None)
    sql = f"SELECT {COLUMNS} FROM events WHERE {where} ORDER BY ts DESC, id DESC LIMIT ${len(args) + 1}"
    async for row in conn.cursor(sql, *args, limit, prefetch=prefetch):
        yield row
