"""Sites: registration per workspace, lookups for ingestion, DNS verification state."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from storage.workspaces import ensure_workspace

_COLUMNS = "id, workspace_id, domain, verification_token, verified_at, created_at, time_zone"


async def site_by_id(conn: asyncpg.Connection, site_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {_COLUMNS} FROM sites WHERE id = $1", site_id)


async def site_by_name(conn: asyncpg.Connection, workspace_id: int, name: str) -> asyncpg.Record | None:
    """A site of the workspace named by its domain (as Plausible's APIs name sites) or by its id."""
    return await conn.fetchrow(
        "SELECT id, domain, time_zone FROM sites WHERE workspace_id = $1 AND (id = $2 OR domain = $2) "
        "ORDER BY id = $2 DESC, created_at LIMIT 1", workspace_id, name)


async def first_moment(conn: asyncpg.Connection, site_id: str) -> datetime | None:
    """When the site was made, or its first event when that is earlier (a restore, an import): one probe of the
    (site_id, ts) index."""
    return await conn.fetchval(
        "SELECT least(created_at, (SELECT min(ts) FROM events WHERE site_id = $1)) FROM sites WHERE id = $1",
        site_id)


async def list_sites(conn: asyncpg.Connection, workspace_id: int, limit: int,
                     offset: int = 0) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {_COLUMNS} FROM sites WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3",
        workspace_id, limit, offset,
    )


async def count_sites(conn: asyncpg.Connection, workspace_id: int) -> int:
    return await conn.fetchval("SELECT count(*) FROM sites WHERE workspace_id = $1", workspace_id)


async def create_site(
    conn: asyncpg.Connection, site_id: str, workspace_id: int, domain: str, token: str, time_zone: str = "UTC"
) -> asyncpg.Record | None:
    """Insert the site; None when the id or (workspace, domain) is already taken."""
    return await conn.fetchrow(
        f"""
        INSERT INTO sites (id, workspace_id, domain, verification_token, time_zone) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT DO NOTHING
        RETURNING {_COLUMNS}
        """,
        site_id, workspace_id, domain, token, time_zone,
    )


async def set_time_zone(conn: asyncpg.Connection, site_id: str, workspace_id: int,
                        time_zone: str) -> asyncpg.Record | None:
    """Change the site's time zone; None when the site is not the workspace's."""
    return await conn.fetchrow(
        f"UPDATE sites SET time_zone = $3 WHERE id = $1 AND workspace_id = $2 RETURNING {_COLUMNS}",
        site_id, workspace_id, time_zone,
    )


async def site_by_domain(conn: asyncpg.Connection, workspace_id: int, domain: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM sites WHERE workspace_id = $1 AND domain = $2", workspace_id, domain
    )


async def site_with_domain(conn: asyncpg.Connection, domain: str) -> asyncpg.Record | None:
    """The site of any workspace registered for the domain: the verified owner, else the oldest claim."""
    return await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM sites WHERE domain = $1 ORDER BY verified_at IS NULL, created_at, id LIMIT 1",
        domain,
    )


async def create_dev_site(conn: asyncpg.Connection, site_id: str, workspace: str, token: str, *,
                          domain: str | None = None) -> tuple[asyncpg.Record, bool]:
    """Development auto-registration: the unknown id becomes a site of the named workspace, with the
    given domain or else the id as its domain (or a suffixed one if that domain is already registered
    there). Returns the row and whether this call created it."""
    domain = domain or site_id
    async with conn.transaction():
        workspace_id = await ensure_workspace(conn, workspace)
        row = await create_site(conn, site_id, workspace_id, domain, token)
        if row is None:
            row = await site_by_id(conn, site_id)
            if row is not None:
                return row, False
            row = await create_site(conn, site_id, workspace_id, f"{domain} (auto)", token)
        if row is None:
            return await site_by_id(conn, site_id), False
    return row, True


async def any_domain_registered(conn: asyncpg.Connection, domains: list[str]) -> bool:
    return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM sites WHERE domain = ANY($1::text[]))", domains)


async def verified_elsewhere(conn: asyncpg.Connection, domain: str, workspace_id: int) -> bool:
    """Another workspace has verified this domain (and so owns it)."""
    return await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM sites WHERE domain = $1 AND verified_at IS NOT NULL AND workspace_id <> $2)",
        domain, workspace_id,
    )


async def mark_verified(conn: asyncpg.Connection, site_id: str) -> bool:
    """Verify the site; False when another claim of its domain was verified first (the partial unique
    index of migration 0012 makes the first verification win, even between racing requests)."""
    try:
        await conn.execute(
            "UPDATE sites SET verified_at = now() WHERE id = $1 AND verified_at IS NULL", site_id
        )
    except asyncpg.UniqueViolationError:
        return False
    return True
