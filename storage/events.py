"""Event writes (the actors' batched COPY) and the keyed event listing."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import asyncpg

from storage.analytics_mirror import queue_erasure

# Visit dimensions of site events (migration 0013), filled at ingestion; keyed events leave them NULL.
DIMENSION_COLUMNS = (
    "browser", "browser_version", "os", "os_version", "device",
    "utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "source", "channel",
    "region", "city",
)
NO_DIMENSIONS: tuple[None, ...] = (None,) * len(DIMENSION_COLUMNS)
# Column order of the tuples the actors hand to copy_events().
EVENT_COLUMNS = (
    "id", "workspace_id", "env", "site_id", "name", "user_id", "anonymous_id", "session_id",
    "properties", "url", "path", "referrer", "title", "viewport_w", "country", "ip_hash",
    "ts", "received_at", *DIMENSION_COLUMNS,
)
BASE_WIDTH = len(EVENT_COLUMNS) - len(DIMENSION_COLUMNS)
COL = {name: i for i, name in enumerate(EVENT_COLUMNS)}

ENSURE_PARTITION = "SELECT tally_ensure_event_partition($1)"


def erasure_lock_key(workspace_id: int, env: str) -> tuple[int, int]:
    """Two-int advisory lock key shared by flushes (shared, taken by the events trigger of migration 0009,
    which spells the same formula in SQL) and erasures (exclusive)."""
    return (workspace_id % 2_147_483_647, 1 if env == "test" else 0)


async def ensure_partitions(conn: asyncpg.Connection, months: Iterable[datetime]) -> None:
    for month in months:
        await conn.execute(ENSURE_PARTITION, month)


async def copy_events(conn: asyncpg.Connection, records: Sequence[tuple]) -> None:
    """COPY records in EVENT_COLUMNS order. Every record of a call has the same width: all columns, or
    (fixtures and benchmarks written before migration 0013) only the first BASE_WIDTH, leaving the
    dimension columns NULL."""
    width = len(records[0]) if records else len(EVENT_COLUMNS)
    columns = EVENT_COLUMNS if width == len(EVENT_COLUMNS) else EVENT_COLUMNS[:BASE_WIDTH]
    await conn.copy_records_to_table("events", records=records, columns=columns)


_LIST_BASE = (
    "SELECT id, name, user_id, anonymous_id, properties, ts, received_at FROM events "
    "WHERE workspace_id = $1 AND env = $2 AND site_id IS NULL"
)
# Filters are constant fragments chosen by which parameters are present; values are always bound.
_LIST_FILTERS = {
    "event": "name = ${}",
    "user_id": "user_id = ${}",
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
        await conn.execute(
            "DELETE FROM user_profiles WHERE workspace_id = $1 AND env = $2 AND user_id = $3",
            workspace_id, env, user_id,
        )
        await queue_erasure(conn, workspace_id, env, user_id)
