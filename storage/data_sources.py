"""Data sources: rows, the status machine's atomic transitions, and the page commit of a sync."""

from __future__ import annotations

from datetime import datetime

import asyncpg

PUBLIC = (
    "id, name, type, status, status_reason, options, frequency, sync_time, next_sync_at, "
    "last_synced_at, rows_imported, created_at"
)
# What a runner needs to sync (includes the sealed credentials; never rendered).
RUNNABLE = "id, workspace_id, env, type, status, credentials, options, frequency, sync_time, sync_cursor"
# A claim answered to a request: what the runner needs and what the response shows.
CLAIMED = f"{RUNNABLE}, name, status_reason, next_sync_at, last_synced_at, rows_imported, created_at"


async def insert(
    conn: asyncpg.Connection, *, source_id: str, workspace_id: int, env: str, name: str, type_: str,
    credentials: bytes, options: dict, frequency: str, sync_time: str, write_key_hash: bytes | None = None,
) -> asyncpg.Record | None:
    """New sources start in 'testing', unleased: a pulled source's check is claimed next (claim_new, or the
    scheduled job when no slot was free), a segment source turns active on its first call. None when its
    write key is already registered."""
    return await conn.fetchrow(
        f"""INSERT INTO data_sources (id, workspace_id, env, name, type, status, credentials, options,
                                     frequency, sync_time, write_key_hash)
            VALUES ($1, $2, $3, $4, $5, 'testing', $6, $7, $8, $9, $10)
            ON CONFLICT (write_key_hash) WHERE write_key_hash IS NOT NULL DO NOTHING
            RETURNING {PUBLIC}""",
        source_id, workspace_id, env, name, type_, credentials, options, frequency, sync_time, write_key_hash,
    )


async def get(conn: asyncpg.Connection, workspace_id: int, env: str, source_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {PUBLIC} FROM data_sources WHERE workspace_id = $1 AND env = $2 AND id = $3",
        workspace_id, env, source_id,
    )


async def page(conn: asyncpg.Connection, workspace_id: int, env: str, after: str, limit: int) -> list:
    return await conn.fetch(
        f"SELECT {PUBLIC} FROM data_sources WHERE workspace_id = $1 AND env = $2 AND id > $3 ORDER BY id LIMIT $4",
        workspace_id, env, after, limit,
    )


async def delete(conn: asyncpg.Connection, workspace_id: int, env: str, source_id: str) -> bool:
    """Removes the row (and with it the credentials); imported events stay where they are."""
    done = await conn.execute(
        "DELETE FROM data_sources WHERE workspace_id = $1 AND env = $2 AND id = $3", workspace_id, env, source_id
    )
    return done != "DELETE 0"


async def pause(conn: asyncpg.Connection, workspace_id: int, env: str, source_id: str) -> asyncpg.Record | None:
    """-> paused, remembering the status it had for resume (a second pause keeps the first one's)."""
    return await conn.fetchrow(
        f"""UPDATE data_sources SET status = 'paused', status_reason = NULL,
                   unpaused_status = CASE WHEN status = 'paused' THEN unpaused_status ELSE status END
            WHERE workspace_id = $1 AND env = $2 AND id = $3 RETURNING {PUBLIC}""",
        workspace_id, env, source_id,
    )


async def resume(
    conn: asyncpg.Connection, workspace_id: int, env: str, source_id: str, next_sync_at: datetime
) -> asyncpg.Record | None:
    """paused -> testing when paused before its connection check and first sync passed (a run still checking
    goes on; without one the scheduled job checks it at once, as it does new sources); else -> active with
    the next sync per schedule, or -> syncing when a run paused between pages still holds the lease (it goes
    on, and ends the source as any run does); other states are left as they are. The lease stays with that
    run: a second one would import its pages again."""
    await conn.execute(
        """UPDATE data_sources
           SET status = CASE WHEN unpaused_status = 'testing' THEN 'testing'
                             WHEN lease_until > now() THEN 'syncing' ELSE 'active' END,
               next_sync_at = $4, unpaused_status = NULL
           WHERE workspace_id = $1 AND env = $2 AND id = $3 AND status = 'paused'""",
        workspace_id, env, source_id, next_sync_at,
    )
    return await get(conn, workspace_id, env, source_id)


async def claim_manual(
    conn: asyncpg.Connection, workspace_id: int, env: str, source_id: str, lease_seconds: float
) -> asyncpg.Record | None:
    """Take the lease for an on-demand sync of an active or errored source; None when it cannot run now."""
    return await conn.fetchrow(
        f"""UPDATE data_sources SET status = 'syncing', lease_until = now() + make_interval(secs => $4)
            WHERE workspace_id = $1 AND env = $2 AND id = $3 AND status IN ('active', 'error')
              AND type <> 'segment' AND (lease_until IS NULL OR lease_until < now())
            RETURNING {CLAIMED}""",
        workspace_id, env, source_id, lease_seconds,
    )


async def claim_new(conn: asyncpg.Connection, source_id: str, lease_seconds: float) -> asyncpg.Record | None:
    """Take the lease for the check of a source just created; None when another process's job took it first."""
    return await conn.fetchrow(
        f"""UPDATE data_sources SET lease_until = now() + make_interval(secs => $2)
            WHERE id = $1 AND status = 'testing' AND type <> 'segment'
              AND (lease_until IS NULL OR lease_until < now())
            RETURNING {RUNNABLE}""",
        source_id, lease_seconds,
    )


# Segment sources receive calls instead of syncing: the runner never picks them up.
CLAIM_NEXT_DUE = f"""
UPDATE data_sources
SET status = CASE WHEN status = 'testing' THEN 'testing' ELSE 'syncing' END,
    lease_until = now() + make_interval(secs => $1)
WHERE id = (
    SELECT id FROM data_sources
    WHERE status <> 'paused' AND type <> 'segment' AND (lease_until IS NULL OR lease_until < now())
      AND (next_sync_at <= now() OR status IN ('testing', 'syncing'))
      AND id <> ALL($2::text[]) AND workspace_id <> ALL($3::bigint[])
    ORDER BY next_sync_at NULLS FIRST, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING {RUNNABLE}
"""


async def claim_next_due(
    conn: asyncpg.Connection, lease_seconds: float, running: list[str], busy_workspaces: list[int]
) -> asyncpg.Record | None:
    """Lease the source whose scheduled sync is most overdue (or whose runner died: expired lease), leaving
    out the sources `running` in this process (a page slower than the lease must not start a second run
    here) and the workspaces whose share of this process's runs is taken; None when nothing is due. A
    source still 'testing' stays so (its check has not passed yet). Concurrent claimers skip each other's row."""
    return await conn.fetchrow(CLAIM_NEXT_DUE, lease_seconds, running, busy_workspaces)


async def set_syncing(conn: asyncpg.Connection, source_id: str) -> None:
    await conn.execute(
        "UPDATE data_sources SET status = 'syncing' WHERE id = $1 AND status = 'testing'", source_id
    )


async def finish(
    conn: asyncpg.Connection, source_id: str, *, ok: bool, reason: str | None, next_sync_at: datetime | None,
) -> None:
    """End a run: release the lease and move the source to active or error, from whatever status it has
    (testing, syncing, or active once resumed during the run) but paused: a source paused meanwhile stays
    paused, and one whose check and sync passed meanwhile resumes active, no longer testing. last_synced_at
    moves only on success."""
    await conn.execute(
        """UPDATE data_sources
           SET status = CASE WHEN status = 'paused' THEN status ELSE $2 END,
               status_reason = CASE WHEN status = 'paused' THEN status_reason ELSE $3 END,
               unpaused_status = CASE WHEN status = 'paused' AND $4 THEN 'active' ELSE unpaused_status END,
               last_synced_at = CASE WHEN $4 THEN now() ELSE last_synced_at END,
               next_sync_at = COALESCE($5, next_sync_at),
               lease_until = NULL
           WHERE id = $1""",
        source_id, "active" if ok else "error", reason, ok, next_sync_at,
    )


async def stopped_by_pause(conn: asyncpg.Connection, source_id: str) -> None:
    """End a run that found its source paused: release the lease, status and reason as they are, unless the
    source was resumed since (syncing, for this run): with no run left it is active."""
    await conn.execute(
        """UPDATE data_sources SET lease_until = NULL,
                  status = CASE WHEN status = 'syncing' THEN 'active' ELSE status END
           WHERE id = $1""",
        source_id,
    )


async def lock_for_commit(conn: asyncpg.Connection, source_id: str) -> str | None:
    """Inside a page's transaction: the source's status, locked, or None when it was deleted."""
    return await conn.fetchval("SELECT status FROM data_sources WHERE id = $1 FOR UPDATE", source_id)


async def advance(
    conn: asyncpg.Connection, source_id: str, cursor: object, rows: int, lease_seconds: float
) -> None:
    """Store the cursor with the page it covers, and extend the lease while a long sync progresses."""
    await conn.execute(
        """UPDATE data_sources SET sync_cursor = $2, rows_imported = rows_imported + $3,
                  lease_until = now() + make_interval(secs => $4)
           WHERE id = $1""",
        source_id, cursor, rows, lease_seconds,
    )


async def renew_lease(conn: asyncpg.Connection, source_id: str, lease_seconds: float) -> None:
    """A live run keeps its claim; a lease already released (the run ended) stays released."""
    await conn.execute(
        """UPDATE data_sources SET lease_until = now() + make_interval(secs => $2)
           WHERE id = $1 AND lease_until IS NOT NULL""",
        source_id, lease_seconds,
    )


async def release_leases(conn: asyncpg.Connection, source_ids: list[str]) -> None:
    """Runs stopped at shutdown give their claim back, so another process may pick the sources up at once."""
    await conn.execute("UPDATE data_sources SET lease_until = NULL WHERE id = ANY($1)", source_ids)


async def keep_import_digests(conn: asyncpg.Connection, source_id: str, digests: bytes) -> None:
    """Inside a page's transaction: the digests of the rows a one-time import committed with it (migration 0033)."""
    await conn.execute(
        "INSERT INTO data_source_import_digests (source_id, digests) VALUES ($1, $2)", source_id, digests
    )


async def restart_import(conn: asyncpg.Connection, source_id: str) -> None:
    """A one-time import cut short reads its rows again from the first: the digests its pages kept are counted
    afresh (none read again yet), in PostgreSQL, so a resume holds none of them in memory (migration 0035)."""
    async with conn.transaction():
        await conn.execute("DELETE FROM data_source_import_rows WHERE source_id = $1", source_id)
        await conn.execute(
            """INSERT INTO data_source_import_rows (source_id, digest, kept)
               SELECT source_id, substring(digests FROM i * 8 + 1 FOR 8), count(*)
               FROM data_source_import_digests, generate_series(0, length(digests) / 8 - 1) AS i
               WHERE source_id = $1
               GROUP BY 1, 2""",
            source_id,
        )


async def kept_unread(conn: asyncpg.Connection, source_id: str, digests: list[bytes]) -> dict[bytes, int]:
    """Of these digests (one page's rows), how many rows with each a one-time import cut short imported and
    its current sync has not read again yet: as many rows, read now, are skipped."""
    rows = await conn.fetch(
        """SELECT digest, kept - matched AS unread FROM data_source_import_rows
           WHERE source_id = $1 AND digest = ANY($2::bytea[]) AND kept > matched""",
        source_id, digests,
    )
    return {row["digest"]: row["unread"] for row in rows}


async def match_import_rows(conn: asyncpg.Connection, source_id: str, skipped: list[bytes]) -> None:
    """Inside a page's transaction: the kept rows this page read again and skipped."""
    await conn.execute(
        """UPDATE data_source_import_rows AS r SET matched = r.matched + page.n
           FROM (SELECT digest, count(*) AS n FROM unnest($2::bytea[]) AS digest GROUP BY digest) AS page
           WHERE r.source_id = $1 AND r.digest = page.digest""",
        source_id, skipped,
    )


async def drop_import_digests(conn: asyncpg.Connection, source_id: str) -> None:
    """Inside the last page's transaction: the one-time import is complete, its digests are no longer needed."""
    await conn.execute("DELETE FROM data_source_import_digests WHERE source_id = $1", source_id)
    await conn.execute("DELETE FROM data_source_import_rows WHERE source_id = $1", source_id)
