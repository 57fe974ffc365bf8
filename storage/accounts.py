"""Dashboard accounts and their workspace memberships."""

from __future__ import annotations

import asyncpg

from storage.workspaces import ensure_workspace


async def upsert_account(conn: asyncpg.Connection, email: str, password_hash: str, workspace: str) -> int:
    async with conn.transaction():
        workspace_id = await ensure_workspace(conn, workspace)
        account_id = await conn.fetchval(
            """
            INSERT INTO accounts (email, password_hash) VALUES ($1, $2)
            ON CONFLICT (email) DO UPDATE SET password_hash = EXCLUDED.password_hash
            RETURNING id
            """,
            email, password_hash,
        )
        await conn.execute(
            "INSERT INTO memberships (account_id, workspace_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            account_id, workspace_id,
        )
    return account_id


async def account_by_email(conn: asyncpg.Connection, email: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id, email, password_hash FROM accounts WHERE email = $1", email)


async def set_password_hash(conn: asyncpg.Connection, account_id: int, password_hash: str) -> None:
    await conn.execute("UPDATE accounts SET password_hash = $2 WHERE id = $1", account_id, password_hash)


async def workspaces_of(conn: asyncpg.Connection, account_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        """
        SELECT w.id, w.name, w.plan FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.account_id = $1 ORDER BY m.created_at, w.id
        """,
        account_id,
    )


