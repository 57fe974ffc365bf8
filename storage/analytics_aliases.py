"""The analytics store's side of Segment's alias: events an alias moved to another user in PostgreSQL
(migration 0025) have stale copies in the store, under the previous actor, once the mirror has written their
current copies. A mirror round deletes them, so funnels and retention see one person, and erasing the new
id leaves nothing behind."""

from __future__ import annotations

import asyncpg

from storage.clickhouse import AnalyticsStore

# Events an alias moved to another user, and each one's user as PostgreSQL has it now: a
# copy in the store with another user is stale. An event gone since (erased) keeps no copy at all.
_ALIASES = "SELECT seq, workspace_id, env, stamps, ids FROM analytics_aliases ORDER BY seq FOR UPDATE"
_ALIASED = "DELETE FROM analytics_aliases WHERE seq = ANY($1::bigint[])"
_CURRENT_USERS = (
    "SELECT e.id || chr(31) || coalesce(e.user_id, '') FROM unnest($3::timestamptz[], $4::text[]) AS k (ts, id) "
    "JOIN events e ON e.workspace_id = $1 AND e.env = $2 AND e.ts = k.ts AND e.id = k.id"
)
ALIAS_CHUNK = 500


async def drop_stale_copies(conn: asyncpg.Connection, store: AnalyticsStore) -> None:
    """Delete the store's copies of aliased events whose user is no longer theirs (after the round's
    inserts, which wrote the current copies: the alias listed the events in the outbox too). A chunk of
    events per DELETE keeps its text well under ClickHouse's max_query_size."""
    aliases = await conn.fetch(_ALIASES)
    for a in aliases:
        for at in range(0, len(a["ids"]), ALIAS_CHUNK):
            stamps, ids = a["stamps"][at:at + ALIAS_CHUNK], a["ids"][at:at + ALIAS_CHUNK]
            keep = [r[0] for r in await conn.fetch(_CURRENT_USERS, a["workspace_id"], a["env"], stamps, ids)]
            await store.delete_where(
                "keyed_events",
                "workspace_id = {w:UInt64} AND env = {e:String} AND ts BETWEEN {lo:DateTime64(6, 'UTC')} AND "
                "{hi:DateTime64(6, 'UTC')} AND has({ids:Array(String)}, id) "
                "AND NOT has({keep:Array(String)}, concat(id, char(31), user_id))",
                {"w": a["workspace_id"], "e": a["env"], "lo": min(stamps), "hi": max(stamps), "ids": list(ids),
                 "keep": keep})
    if aliases:
        await conn.execute(_ALIASED, [a["seq"] for a in aliases])
