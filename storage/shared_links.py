"""Shared links of a site (migrations 0030, 0031): a secret token that reads one site's overview without a
session, behind a password when the link has one."""

from __future__ import annotations

import asyncpg

_COLUMNS = "l.id, l.site_id, l.token, l.name, l.created_at, l.password_hash"


async def list_links(conn: asyncpg.Connection, site_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        f"SELECT {_COLUMNS} FROM site_shared_links l WHERE l.site_id = $1 ORDER BY l.created_at, l.id", site_id)


async def lock_site(conn: asyncpg.Connection, site_id: str) -> None:
    """Hold the site's row until the transaction ends: creations of one site's links take turns."""
    await conn.execute("SELECT 1 FROM sites WHERE id = $1 FOR UPDATE", site_id)


async def count_links(conn: asyncpg.Connection, site_id: str) -> int:
    return await conn.fetchval("SELECT count(*) FROM site_shared_links WHERE site_id = $1", site_id)


async def create_link(conn: asyncpg.Connection, link_id: str, site_id: str, token: str,
                      name: str, password_hash: str | None = None) -> asyncpg.Record:
    return await conn.fetchrow(
        f"INSERT INTO site_shared_links AS l (id, site_id, token, name, password_hash) VALUES ($1, $2, $3, $4, $5) "
        f"RETURNING {_COLUMNS}",
        link_id, site_id, token, name, password_hash)


async def update_link(conn: asyncpg.Connection, site_id: str, link_id: str, *, name: str | None,
                      set_password: bool, password_hash: str | None) -> asyncpg.Record | None:
    """Rename (name None: keep it) and, with `set_password`, set or remove (None) the password. A new hash
    also ends every access cookie given for the old one (app/shared_access.py signs the hash)."""
    return await conn.fetchrow(
        "UPDATE site_shared_links AS l SET name = coalesce($3, l.name), "
        "password_hash = CASE WHEN $4 THEN $5 ELSE l.password_hash END "
        f"WHERE l.site_id = $1 AND l.id = $2 RETURNING {_COLUMNS}",
        site_id, link_id, name, set_password, password_hash)


async def delete_link(conn: asyncpg.Connection, site_id: str, link_id: str) -> bool:
    """Revoke: the row goes, so the token reads nothing from the next request on."""
    status = await conn.execute("DELETE FROM site_shared_links WHERE site_id = $1 AND id = $2", site_id, link_id)
    return status != "DELETE 0"


async def by_token(conn: asyncpg.Connection, token: str) -> asyncpg.Record | None:
    """The link with its site's domain and workspace, or None for an unknown (or revoked) token."""
    return await conn.fetchrow(
        f"SELECT {_COLUMNS}, s.domain, s.workspace_id FROM site_shared_links l "
        "JOIN sites s ON s.id = l.site_id WHERE l.token = $1",
        token)
