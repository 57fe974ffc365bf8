"""The dashboard reads the warmer keeps (app/dashboard_warmer.py, migration 0023): which unfiltered reads
were asked for, and which process warms a given day."""

from __future__ import annotations

from datetime import date

import asyncpg

# Reads of sites deleted meanwhile are left out rather than failing the whole batch on the foreign key.
_REMEMBER = """
INSERT INTO dashboard_reads (site_id, range, property, last_read)
SELECT r.site_id, r.range, r.property, r.last_read
FROM unnest($1::text[], $2::text[], $3::text[], $4::date[]) AS r (site_id, range, property, last_read)
WHERE EXISTS (SELECT 1 FROM sites s WHERE s.id = r.site_id)
ON CONFLICT (site_id, range, property) DO UPDATE
SET last_read = GREATEST(dashboard_reads.last_read, EXCLUDED.last_read)
"""


async def remember(conn: asyncpg.Connection, reads: list[tuple[str, str, str, date]]) -> None:
    """Store (site, range, property, day last asked) reads; a read stored before keeps its latest day."""
    if reads:
        await conn.execute(_REMEMBER, *(list(column) for column in zip(*reads, strict=True)))


async def recent(conn: asyncpg.Connection, since: date, limit: int) -> list[tuple[str, str, str]]:
    """The reads asked for on `since` or later, the most recently asked first, at most `limit`; older ones
    are forgotten."""
    await conn.execute("DELETE FROM dashboard_reads WHERE last_read < $1", since)
    rows = await conn.fetch("SELECT site_id, range, property FROM dashboard_reads WHERE last_read >= $1 "
                            "ORDER BY last_read DESC, site_id, range, property LIMIT $2", since, limit)
    return [(r["site_id"], r["range"], r["property"]) for r in rows]


async def claim_day(conn: asyncpg.Connection, day: date) -> bool:
    """Whether this caller is the first to claim the warming of `day` (claims older than a week are dropped)."""
    await conn.execute("DELETE FROM dashboard_warmings WHERE day < $1::date - 7", day)
    return await conn.fetchval("INSERT INTO dashboard_warmings (day) VALUES ($1) ON CONFLICT DO NOTHING "
                               "RETURNING true", day) is not None
