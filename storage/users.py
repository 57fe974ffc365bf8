"""User profiles: traits from identify calls, and the profile reads. Activity upkeep (count, last seen) is
the events trigger's (migration 0009)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import asyncpg

from storage.events import erasure_lock_key

# created_at is the earliest time the user was seen, so a back-dated identify moves it back (the events
# trigger does the same for events, migration 0012).
UPSERT_TRAITS = """
INSERT INTO user_profiles AS u (workspace_id, env, user_id, traits, created_at)
SELECT $1, $2, t.user_id, t.traits, t.at
FROM unnest($3::text[], $4::jsonb[], $5::timestamptz[]) AS t(user_id, traits, at)
ON CONFLICT (workspace_id, env, user_id) DO UPDATE
SET traits = u.traits || EXCLUDED.traits,
    created_at = LEAST(u.created_at, EXCLUDED.created_at)
"""

PROFILE_COLUMNS = "user_id, traits, created_at, last_seen_at, event_count, seq"


async def merge_traits(
    conn: asyncpg.Connection, workspace_id: int, env: str, traits: dict[str, tuple[dict, datetime]]
) -> None:
    """traits: user_id -> (traits merged in call order, earliest identify time)."""
    if not traits:
        return
    users = sorted(traits)
    await conn.execute(
        UPSERT_TRAITS, workspace_id, env, users, [traits[u][0] for u in users], [traits[u][1] for u in users]
    )


ERASURES_OF = """
SELECT user_id, max(erased_at) AS erased_at FROM erasures
WHERE workspace_id = $1 AND env = $2 AND user_id = ANY($3::text[])
GROUP BY user_id
"""


async def erasures_of(conn: asyncpg.Connection, workspace_id: int, env: str,
                      user_ids: Iterable[str]) -> dict[str, datetime]:
    """The latest erasure of each of these ids, for dropping identify calls received before it. In the
    caller's transaction: the erasure lock is taken shared first, as the events trigger takes it (migration
    0029), so an erasure under way is waited for and its tombstone read (a statement after the lock)."""
    await conn.execute("SELECT pg_advisory_xact_lock_shared($1, $2)", *erasure_lock_key(workspace_id, env))
    rows = await conn.fetch(ERASURES_OF, workspace_id, env, sorted(set(user_ids)))
    return {row["user_id"]: row["erased_at"] for row in rows}


async def get_profile(conn: asyncpg.Connection, workspace_id: int, env: str, user_id: str):
    return await conn.fetchrow(
        f"SELECT {PROFILE_COLUMNS} FROM user_profiles WHERE workspace_id = $1 AND env = $2 AND user_id = $3",
        workspace_id, env, user_id,
    )


LIST_PROFILES = f"""
SELECT {PROFILE_COLUMNS} FROM user_profiles p
WHERE workspace_id = $1 AND env = $2 AND seq > $3
  AND NOT EXISTS (
      SELECT 1 FROM unnest($4::text[], $5::text[]) AS f(k, v)
      WHERE (p.traits ->> f.k) IS DISTINCT FROM f.v)
ORDER BY seq
LIMIT $6
"""


async def list_profiles(
    conn: asyncpg.Connection, workspace_id: int, env: str, *,
    trait_filters: dict[str, str], after_seq: int, limit: int,
) -> list[asyncpg.Record]:
    keys = list(trait_filters)
    return await conn.fetch(
        LIST_PROFILES, workspace_id, env, after_seq, keys, [trait_filters[k] for k in keys], limit
    )
