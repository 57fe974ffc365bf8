"""The sessions table: one row per visit, upserted by the site actor in its flush transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg


@dataclass(slots=True)
class SessionDelta:
    """What one batch adds to a session."""

    id: str
    started_at: datetime
    ended_at: datetime
    pageviews: int = 0
    events: int = 0
    entry_path: str | None = None  # first pageview's path in this batch
    exit_path: str | None = None  # last pageview's path in this batch
    referrer: str | None = None  # first non-empty referrer in this batch
    country: str | None = None


# Rows are sorted by id before the upsert so that concurrent flushes lock them in the same order.
UPSERT = """
INSERT INTO sessions AS s (site_id, id, started_at, ended_at, pageviews, events, entry_path, exit_path,
                           referrer, country)
SELECT $1, * FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[], $5::int[], $6::int[],
                         $7::text[], $8::text[], $9::text[], $10::text[])
ON CONFLICT (site_id, id) DO UPDATE SET
    started_at = LEAST(s.started_at, EXCLUDED.started_at),
    ended_at = GREATEST(s.ended_at, EXCLUDED.ended_at),
    pageviews = s.pageviews + EXCLUDED.pageviews,
    events = s.events + EXCLUDED.events,
    entry_path = CASE WHEN EXCLUDED.started_at < s.started_at AND EXCLUDED.entry_path IS NOT NULL
                      THEN EXCLUDED.entry_path ELSE COALESCE(s.entry_path, EXCLUDED.entry_path) END,
    exit_path = CASE WHEN EXCLUDED.ended_at >= s.ended_at AND EXCLUDED.exit_path IS NOT NULL
                     THEN EXCLUDED.exit_path ELSE COALESCE(s.exit_path, EXCLUDED.exit_path) END,
    referrer = COALESCE(s.referrer, EXCLUDED.referrer),
    country = COALESCE(s.country, EXCLUDED.country)
"""


async def upsert_sessions(conn: asyncpg.Connection, site_id: str, deltas: list[SessionDelta]) -> None:
    if not deltas:
        return
    rows = sorted(deltas, key=lambda d: d.id)
    await conn.execute(
        UPSERT, site_id,
        [d.id for d in rows], [d.started_at for d in rows], [d.ended_at for d in rows],
        [d.pageviews for d in rows], [d.events for d in rows], [d.entry_path for d in rows],
        [d.exit_path for d in rows], [d.referrer for d in rows], [d.country for d in rows],
    )


async def session_rows(conn: asyncpg.Connection, site_id: str) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM sessions WHERE site_id = $1 ORDER BY started_at, id", site_id)
