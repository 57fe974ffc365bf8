"""Dashboard sessions of the no-Redis mode: one row per signed-in browser, keyed by the SHA-256 of the
cookie's random id (a database read never yields a usable cookie)."""

from __future__ import annotations

import asyncpg


async def load(conn: asyncpg.Connection, key_hash: bytes) -> str | None:
    return await conn.fetchval(
        "SELECT data FROM dashboard_sessions WHERE id = $1 AND expires_at > now()", key_hash
    )


async def save(conn: asyncpg.Connection, key_hash: bytes, data: str, max_age_seconds: int) -> None:
    await conn.execute(
        """
        INSERT INTO dashboard_sessions (id, data, expires_at)
        VALUES ($1, $2, now() + make_interval(secs => $3))
        ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data, expires_at = EXCLUDED.expires_at
        """,
        key_hash, data, float(max_age_seconds),
    )


async def delete(conn: asyncpg.Connection, key_hash: bytes) -> None:
    await conn.execute("DELETE FROM dashboard_sessions WHERE id = $1", key_hash)


async def purge_expired(conn: asyncpg.Connection) -> None:
    await conn.execute("DELETE FROM dashboard_sessions WHERE expires_at <= now()")


async def delete_for_account(conn: asyncpg.Connection, account_id: int) -> int:
    """End every session of one account (its password was reset); returns how many there were."""
    status = await conn.execute(
        "DELETE FROM dashboard_sessions WHERE (data::jsonb #>> '{session,account_id}') = $1::bigint::text",
        account_id,
    )
    return int(status.split()[-1])
