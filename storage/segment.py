"""Segment tracking calls: write-key lookup, the messageId dedupe ledger, alias merges and source upkeep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from storage.events import COL

SOURCE_BY_WRITE_KEY = """
SELECT s.id, s.workspace_id, s.env, s.status, s.write_key_hash, w.plan, w.rate_limits
FROM data_sources s JOIN workspaces w ON w.id = s.workspace_id
WHERE s.write_key_hash = $1 AND s.type = 'segment'
"""

# Sorted, so that concurrent flushes claiming overlapping ids take the key locks in one order (no deadlock).
# A retry racing the first delivery blocks on the uncommitted key, then skips it once that commits.
CLAIM = """
INSERT INTO segment_messages (source_id, message_id, received_at)
SELECT m.source_id, m.message_id, $3 FROM unnest($1::text[], $2::text[]) AS m(source_id, message_id)
ORDER BY 1, 2
ON CONFLICT DO NOTHING
RETURNING source_id, message_id
"""

ALIAS = "SELECT tally_segment_alias($1, $2, $3, $4)"

# The first accepted call moves testing -> active; last_synced_at follows deliveries to the second. Rows
# already touched within the second are skipped, and a skipped row is not locked: concurrent flushes of one
# busy source do not queue on its row.
_TOUCH_SET = """
UPDATE data_sources
SET status = CASE WHEN status = 'testing' THEN 'active' ELSE status END,
    status_reason = CASE WHEN status = 'testing' THEN NULL ELSE status_reason END,
    last_synced_at = GREATEST(last_synced_at, {delivered}::timestamptz)
WHERE id = ANY({ids}::text[]) AND type = 'segment'
  AND (status = 'testing' OR last_synced_at IS NULL OR last_synced_at < {delivered}::timestamptz - interval '1 second')
"""
TOUCH = _TOUCH_SET.format(ids="$1", delivered="$2")

# Events only (every call a track, page or screen): claim, store and touch in one statement, so one round
# trip and one implicit transaction, like a /v1/events flush. The unreferenced touch runs last.
STORE_EVENTS = f"""
WITH claimed AS (
    INSERT INTO segment_messages (source_id, message_id, received_at)
    SELECT c.source_id, c.message_id, $11 FROM unnest($12::text[], $13::text[]) AS c(source_id, message_id)
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING
    RETURNING source_id, message_id
), touched AS ({_TOUCH_SET.format(ids="$14", delivered="$11")})
INSERT INTO events (id, workspace_id, env, name, user_id, anonymous_id, properties, ts, received_at)
SELECT e.id, $1, $2, e.name, e.user_id, e.anonymous_id, e.properties, e.ts, e.received_at
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[],
            $9::timestamptz[], $10::text[], $15::text[])
     AS e(id, name, user_id, anonymous_id, properties, ts, received_at, source_id, message_id)
WHERE e.message_id IS NULL
   OR EXISTS (SELECT 1 FROM claimed c WHERE c.source_id = e.source_id AND c.message_id = e.message_id)
"""

PRUNE = """
DELETE FROM segment_messages WHERE ctid IN (
    SELECT ctid FROM segment_messages WHERE received_at < now() - make_interval(hours => $1) LIMIT $2)
"""


async def source_by_write_key(conn: asyncpg.Connection, digest: bytes) -> asyncpg.Record | None:
    return await conn.fetchrow(SOURCE_BY_WRITE_KEY, digest)


async def claim_messages(conn: asyncpg.Connection, keys: Sequence[tuple[str, str]],
                         received: datetime) -> set[tuple[str, str]]:
    """Record (source_id, message_id) pairs; returns those seen for the first time. Call inside the
    transaction that stores the messages, so a rolled-back flush leaves its ids claimable."""
    if not keys:
        return set()
    ordered = sorted(set(keys))
    rows = await conn.fetch(CLAIM, [k[0] for k in ordered], [k[1] for k in ordered], received)
    return {(r["source_id"], r["message_id"]) for r in rows}


async def store_events(conn: asyncpg.Connection, workspace_id: int, env: str, items: Sequence[tuple],
                       delivered: datetime) -> None:
    """items: (source_id, message_id or None, events row), no messageId twice. Stores the rows whose
    messageId is new, in one statement (see STORE_EVENTS); the events trigger keeps profiles."""
    rows = [item[2] for item in items]
    claims = sorted({(item[0], item[1]) for item in items if item[1] is not None})

    def column(name: str) -> list:
        index = COL[name]
        return [r[index] for r in rows]

    await conn.execute(
        STORE_EVENTS, workspace_id, env,
        column("id"), column("name"), column("user_id"), column("anonymous_id"), column("properties"),
        column("ts"), column("received_at"), [item[0] for item in items],
        delivered, [c[0] for c in claims], [c[1] for c in claims], sorted({item[0] for item in items}),
        [item[1] for item in items],
    )


async def alias(conn: asyncpg.Connection, workspace_id: int, env: str, previous: str, target: str) -> None:
    await conn.execute(ALIAS, workspace_id, env, previous, target)


async def touch_sources(conn: asyncpg.Connection, source_ids: Sequence[str], delivered: datetime) -> None:
    """First accepted call: testing -> active; last_synced_at follows the latest delivery."""
    await conn.execute(TOUCH, sorted(set(source_ids)), delivered)


async def prune_messages(conn: asyncpg.Connection, older_than_hours: int, chunk: int = 50_000) -> int:
    """Forget messageIds past the dedupe window, a chunk per statement so no lock is held for long."""
    total = 0
    while True:
        done = await conn.execute(PRUNE, older_than_hours, chunk)
        deleted = int(done.split()[-1])
        total += deleted
        if deleted < chunk:
            return total
