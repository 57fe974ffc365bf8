"""Event writes (the actors' batched COPY) and the keyed event listing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from storage.analytics_mirror import queue_erasure


class EventRow(NamedTuple):
    """One row of the events table, as every writer builds it and COPY sends it (columns by name, so
    the field order here is free: the fields every row sets come first)."""

    id: str
    workspace_id: int
    env: str  # "live" or "test"
    name: str
    ts: datetime  # when it happened (site events: when the server received it)
    received_at: datetime
    site_id: str | None = None  # site events only; keyed and imported events leave it NULL
    user_id: str | None = None
    anonymous_id: str | None = None
    session_id: str | None = None  # site events: None until the site actor assigns one
    properties: Any = None
    url: str | None = None
    path: str | None = None
    referrer: str | None = None
    title: str | None = None
    viewport_w: int | None = None
    country: str | None = None
    ip_hash: str | None = None
    # Visit dimensions of site events (migration 0013), filled at ingestion; keyed events leave them NULL.
    browser: str | None = None
    browser_version: str | None = None
    os: str | None = None
    os_version: str | None = None
    device: str | None = None
    utm_source: str | None = None
    utm_medium: str | None = None
    utm_campaign: str | None = None
    utm_term: str | None = None
    utm_content: str | None = None
    source: str | None = None
    channel: str | None = None
    region: str | None = None
    city: str | None = None


EVENT_COLUMNS: tuple[str, ...] = EventRow._fields
# The fields up to `properties` are all a keyed event sets; the rest (page and visit fields) default to NULL.
_NARROW = EVENT_COLUMNS.index("properties") + 1
NARROW_COLUMNS = EVENT_COLUMNS[:_NARROW]
_EMPTY_TAIL = (None,) * (len(EVENT_COLUMNS) - _NARROW)

ENSURE_PARTITION = "SELECT tally_ensure_event_partition($1)"


def erasure_lock_key(workspace_id: int, env: str) -> tuple[int, int]:
    """Two-int advisory lock key shared by flushes (shared, taken by the events trigger of migration 0009,
    which spells the same formula in SQL) and erasures (exclusive)."""
    return (workspace_id % 2_147_483_647, 1 if env == "test" else 0)


async def ensure_partitions(conn: asyncpg.Connection, months: Iterable[datetime]) -> None:
    for month in months:
        await conn.execute(ENSURE_PARTITION, month)


async def copy_events(conn: asyncpg.Connection, rows: Sequence[EventRow]) -> None:
    """COPY the rows in one statement (the events triggers keep profiles and the analytics outbox). A batch
    whose rows leave every page and visit field empty (keyed events) sends only the leading columns:
    encoding 21 NULLs a row cost asyncpg and PostgreSQL a quarter of the COPY (bench/ingest.py's rows)."""
    if all(r[_NARROW:] == _EMPTY_TAIL for r in rows):
        await conn.copy_records_to_table("events", records=[r[:_NARROW] for r in rows], columns=NARROW_COLUMNS)
    else:
        await conn.copy_records_to_table("events", records=rows, columns=EVENT_COLUMNS)


_LIST_BASE = (
    "SELECT id, name, user_id, anonymous_id, properties, ts, received_at FROM events "
    "WHERE workspace_id = $1 AND env = $2 AND site_id IS NULL"
)
# Filters are constant fragments chosen by which parameters are present; values are always bound.
_LIST_FILTERS = {
    "event": "name = ${}",
    "user_id": "user_id = ${}",
    "anonymous_id": "anonymous_id = ${}",
    "from": "ts >= ${}",
    "to": "ts <= ${}",
}


async def list_events(
    conn: asyncpg.Connection,
    workspace_id: int,
    env: str,
    *,
    filters: dict[str, object],
    after: tuple[datetime, str] | None,
    limit: int,
) -> list[asyncpg.Record]:
    sql = [_LIST_BASE]
    args: list[object] = [workspace_id, env]
    for name, fragment in _LIST_FILTERS.items():
        if filters.get(name) is not None:
            args.append(filters[name])
            sql.append("AND " + fragment.format(len(args)))
    if after is not None:
        args.extend(after)
        sql.append(f"AND (ts, id) < (${len(args) - 1}, ${len(args)})")
    args.append(limit)
    sql.append(f"ORDER BY ts DESC, id DESC LIMIT ${len(args)}")
    return await conn.fetch(" ".join(sql), *args)


FIRST_SEEN = """
SELECT properties->>$4 AS value, min(ts) AS ts FROM events
WHERE workspace_id = $1 AND env = $2 AND name = $3 AND ts >= $5 AND site_id IS NULL AND properties->>$4 IS NOT NULL
GROUP BY 1
"""


async def first_seen(conn: asyncpg.Connection, workspace_id: int, env: str, name: str, prop: str,
                     since: datetime) -> dict[str, datetime]:
    """Each value of property `prop` in the keyed events named `name` since `since`, with its earliest time
    (the name index narrows the scan to those events; partitions before `since` are skipped)."""
    rows = await conn.fetch(FIRST_SEEN, workspace_id, env, name, prop, since)
    return {row["value"]: row["ts"] for row in rows}


async def erase_user(conn: asyncpg.Connection, workspace_id: int, env: str, user_id: str,
                     erased_at: datetime) -> None:
    """Delete a user's profile and events. The exclusive lock waits for in-flight flushes; the
    tombstone makes later flushes drop events received before now. The erasure is queued for the
    analytics store in the same transaction (storage/analytics_mirror.py applies it)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", *erasure_lock_key(workspace_id, env))
        await conn.execute(
            "INSERT INTO erasures (workspace_id, env, user_id, erased_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT DO NOTHING",
            workspace_id, env, user_id, erased_at,
        )
        await conn.execute(
            "DELETE FROM events WHERE workspace_id = $1 AND env = $2 AND user_id = $3",
            workspace_id, env, user_id,
        )
        # The id's anonymous events too: reports count an anonymous id as a user (docs/decisions.md, Erasure).
        await conn.execute(
            "DELETE FROM events WHERE workspace_id = $1 AND env = $2 AND user_id IS NULL AND anonymous_id = $3 "
            "AND site_id IS NULL",
            workspace_id, env, user_id,
        )
        await conn.execute(
            "DELETE FROM user_profiles WHERE workspace_id = $1 AND env = $2 AND user_id = $3",
            workspace_id, env, user_id,
        )
        await queue_erasure(conn, workspace_id, env, user_id)
