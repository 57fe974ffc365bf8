"""Workspaces, their plans and API keys."""

from __future__ import annotations

from datetime import datetime

import asyncpg


async def ensure_workspace(conn: asyncpg.Connection, name: str) -> int:
    return await conn.fetchval(
        """
        INSERT INTO workspaces (name) VALUES ($1)
        ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
        RETURNING id
        """,
        name,
    )


async def workspace_by_name(conn: asyncpg.Connection, name: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id, name, plan, rate_limits FROM workspaces WHERE name = $1", name)


async def set_plan(conn: asyncpg.Connection, workspace_id: int, plan: str, limits: dict) -> None:
    await conn.execute(
        "UPDATE workspaces SET plan = $2, rate_limits = $3 WHERE id = $1", workspace_id, plan, limits
    )


async def insert_key(
    conn: asyncpg.Connection,
    *,
    key_id: str,
    workspace_id: int,
    env: str,
    name: str,
    scopes: list[str],
    key_hash: bytes,
    prefix: str,
    expires_at: datetime | None,
) -> None:
    await conn.execute(
        """
        INSERT INTO api_keys (id, workspace_id, env, name, scopes, key_hash, prefix, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
        """,
        key_id, workspace_id, env, name, scopes, key_hash, prefix, expires_at,
    )


async def key_by_hash(conn: asyncpg.Connection, key_hash: bytes) -> asyncpg.Record | None:
    return await conn.fetchrow(
        """
        SELECT k.id, k.workspace_id, k.env, k.scopes, k.key_hash, k.expires_at, k.revoked_at,
               w.plan, w.rate_limits
        FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id
        WHERE k.key_hash = $1
        """,
        key_hash,
    )


async def revoke_key(conn: asyncpg.Connection, key_id: str) -> bool:
    status = await conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", key_id
    )
    return status.endswith(" 1")


async def list_keys(conn: asyncpg.Connection, workspace_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        """
        SELECT id, env, name, scopes, prefix, expires_at, revoked_at, created_at
        FROM api_keys WHERE workspace_id = $1 ORDER BY created_at, id
        """,
        workspace_id,
    )


# Dashboard key management (app/views/api_keys.py): every query is scoped by the session's workspace.


async def workspace_name(conn: asyncpg.Connection, workspace_id: int) -> str | None:
    return await conn.fetchval("SELECT name FROM workspaces WHERE id = $1", workspace_id)


async def workspace_key(conn: asyncpg.Connection, workspace_id: int, key_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        """
        SELECT id, env, name, scopes, prefix, expires_at, revoked_at, created_at
        FROM api_keys WHERE workspace_id = $1 AND id = $2
        """,
        workspace_id, key_id,
    )


async def revoke_workspace_key(conn: asyncpg.Connection, workspace_id: int, key_id: str) -> asyncpg.Record | None:
    """Revoke a key of this workspace; an already revoked key keeps its first revocation time."""
    return await conn.fetchrow(
        """
        UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
        WHERE workspace_id = $1 AND id = $2
        RETURNING id, env, name, scopes, prefix, expires_at, revoked_at, created_at
        """,
        workspace_id, key_id,
    )
