"""Segment tracking calls: write-key lookup, the messageId dedupe ledger, alias merges and source upkeep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from storage.events import EventRow

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
# trip and one implicit transaction, like a /v1/events flush. The unreferenced touch runs after the insert
# and before the insert's AFTER triggers (the profile upkeep): a source's row is locked before a profile's,
# the order every Segment flush keeps (actors/workspace.py). The rows
# travel as one jsonb array: asyncpg's array encoding checks every element against abstract base classes,
# which cost twice the COPY of the same rows.
STORE_EVENTS = f"""
WITH incoming AS (
    SELECT * FROM jsonb_to_recordset($3::jsonb) AS e(
        id text, name text, user_id text, anonymous_id text, properties jsonb, ts timestamptz,
        received_at timestamptz, source_id text, message_id text)
), claimed AS (
    INSERT INTO segment_messages (source_id, message_id, received_at)
    SELECT i.source_id, i.message_id, $4 FROM incoming i WHERE i.message_id IS NOT NULL
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING
    RETURNING source_id, message_id
), touched AS ({_TOUCH_SET.format(ids="$5", delivered="$4")})
INSERT INTO events (id, workspace_id, env, name, user_id, anonymous_id, properties, ts, received_at)
SELECT i.id, $1, $2, i.name, i.user_id, i.anonymous_id, i.properties, i.ts, i.received_at
FROM incoming i
WHERE i.message_id IS NULL
   OR EXISTS (SELECT 1 FROM claimed c WHERE c.source_id = i.source_id AND c.message_id = i.message_id)
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


async def store_events(conn: asyncpg.Connection, workspace_id: int, env: str,
                       items: Sequence[tuple[str, str | None, EventRow]], delivered: datetime) -> None:
    """items: (source_id, message_id or None, events row), no messageId twice. Stores the rows whose
    messageId is new, in one statement (see STORE_EVENTS); the events trigger keeps profiles."""
    rows = [
        {"id": row.id, "name": row.name, "user_id": row.user_id, "anonymous_id": row.anonymous_id,
         "properties": row.properties, "ts": row.ts, "received_at": row.received_at, "source_id": source_id,
         "message_id": message_id}
        for source_id, message_id, row in items
    ]
    await conn.execute(STORE_EVENTS, workspace_id, env, rows, delivered, sorted({item[0] for item in items}))


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
