"""Sites: registration per workspace, lookups for ingestion, DNS verification state."""

from __future__ import annotations

import asyncpg

from storage.workspaces import ensure_workspace

_COLUMNS = "id, workspace_id, domain, verification_token, verified_at, created_at"


async def site_by_id(conn: asyncpg.Connection, site_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {_COLUMNS} FROM sites WHERE id = $1", site_id)


async def list_sites(conn: asyncpg.Connection, workspace_id: int, limit: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {_COLUMNS} FROM sites WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        workspace_id, limit,
    )


async def create_site(
    conn: asyncpg.Connection, site_id: str, workspace_id: int, domain: str, token: str
) -> asyncpg.Record | None:
    """Insert the site; None when the id or (workspace, domain) is already taken."""
    return await conn.fetchrow(
        f"""
        INSERT INTO sites (id, workspace_id, domain, verification_token) VALUES ($1, $2, $3, $4)
        ON CONFLICT DO NOTHING
        RETURNING {_COLUMNS}
        """,
        site_id, workspace_id, domain, token,
    )


async def site_by_domain(conn: asyncpg.Connection, workspace_id: int, domain: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM sites WHERE workspace_id = $1 AND domain = $2", workspace_id, domain
    )


async def site_with_domain(conn: asyncpg.Connection, domain: str) -> asyncpg.Record | None:
    """The site of any workspace registered for the domain (the oldest, should there be several)."""
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM sites WHERE domain = $1 ORDER BY created_at, id LIMIT 1", domain
    )


async def create_dev_site(conn: asyncpg.Connection, site_id: str, workspace: str, token: str, *,
                          domain: str | None = None) -> asyncpg.Record:
    """Development auto-registration: the unknown id becomes a site of the named workspace, with the
    given domain or else the id as its domain (or a suffixed one if that domain is already registered
    there)."""
    domain = domain or site_id
    async with conn.transaction():
        workspace_id = await ensure_workspace(conn, workspace)
        row = await create_site(conn, site_id, workspace_id, domain, token)
        if row is None:
            row = await site_by_id(conn, site_id)
        if row is None:
            row = await create_site(conn, site_id, workspace_id, f"{domain} (auto)", token)
        if row is None:
            row = await site_by_id(conn, site_id)
    return row


async def any_domain_registered(conn: asyncpg.Connection, domains: list[str]) -> bool:
    return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM sites WHERE domain = ANY($1::text[]))", domains)


async def mark_verified(conn: asyncpg.Connection, site_id: str) -> None:
    await conn.execute(
        "UPDATE sites SET verified_at = now() WHERE id = $1 AND verified_at IS NULL", site_id
    )
