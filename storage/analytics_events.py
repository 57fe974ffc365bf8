"""The site event log and its export: stored site events of a window, newest first."""

from __future__ import annotations

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


async def export_page(conn: asyncpg.Connection, site_id: str, start: datetime, end: datetime, name: str | None,
                      after: tuple[datetime, str] | None, limit: int) -> list[asyncpg.Record]:
    """One page of an export (of the events named `name`, or all), newest first, strictly after `after` =
    (ts, id) of the previous page's last row (keyset paging: every page is a short indexed query of its own)."""
    where, args = _scope(site_id, start, end, name)
    if after is not None:
        where += f" AND (ts, id) < (${len(args) + 1}, ${len(args) + 2})"
        args.extend(after)
    return await conn.fetch(
        f"SELECT {COLUMNS} FROM events WHERE {where} ORDER BY ts DESC, id DESC LIMIT ${len(args) + 1}",
        *args, limit,
    )


async def events_by_keys(conn: asyncpg.Connection, site_id: str,
                         keys: list[tuple[datetime, str]]) -> list[asyncpg.Record]:
    """The stored events of these (ts, id) keys (a page the analytics store matched), newest first; the
    keys' time span bounds the index scan."""
    if not keys:
        return []
    stamps = [ts for ts, _ in keys]
    return await conn.fetch(
        f"SELECT {COLUMNS} FROM events WHERE site_id = $1 AND ts >= $2 AND ts <= $3 "
        "AND (ts, id) IN (SELECT * FROM unnest($4::timestamptz[], $5::text[])) ORDER BY ts DESC, id DESC",
        site_id, min(stamps), max(stamps), stamps, [event_id for _, event_id in keys],
    )
