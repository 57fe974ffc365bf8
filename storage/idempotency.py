"""The Idempotency-Key ledger of the keyed API's event ingestion (migration 0036)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import asyncpg


class Claim(NamedTuple):
    """One request's Idempotency-Key: the key, the SHA-256 of its endpoint and body, and its answer's bytes."""

    key: str
    request_sha256: bytes
    response: bytes


# Sorted, so that concurrent flushes claiming overlapping keys take the key locks in one order (no deadlock).
# A retry racing the first request blocks on the uncommitted key, then skips it once that commits (or claims
# it, if that rolled back).
CLAIM = """
INSERT INTO idempotency_keys (workspace_id, env, key, request_sha256, response)
SELECT $1, $2, c.key, c.request_sha256, c.response
FROM unnest($3::text[], $4::bytea[], $5::bytea[]) AS c(key, request_sha256, response)
ORDER BY c.key
ON CONFLICT DO NOTHING
RETURNING key
"""

# At most this many claim statements per flush: a key pruned between one's claim and read goes to the next.
_ROUNDS = 3

EARLIER = """
SELECT key, request_sha256, response FROM idempotency_keys
WHERE workspace_id = $1 AND env = $2 AND key = ANY($3::text[])
"""

PRUNE = """
DELETE FROM idempotency_keys WHERE ctid IN (
    SELECT ctid FROM idempotency_keys WHERE created_at < now() - make_interval(hours => $1) LIMIT $2)
"""


async def claim(conn: asyncpg.Connection, workspace_id: int, env: str,
                claims: Sequence[Claim]) -> tuple[set[str], dict[str, Claim]]:
    """Record the claims (no key twice). Returns the keys claimed now, and by key the earlier claim of each key
    already taken, to be answered as a retry. Call inside the transaction that stores the claimed requests'
    events, so a rolled-back flush leaves its keys claimable."""
    fresh: set[str] = set()
    earlier: dict[str, Claim] = {}
    left = sorted(claims)
    # A key taken at the claim but gone at the read was pruned in between (past the window): it is new again,
    # so it is claimed once more. Each round settles every key unless the prune strikes again in between.
    for _ in range(_ROUNDS):
        if not left:
            break
        now = {r["key"] for r in await conn.fetch(
            CLAIM, workspace_id, env, [c.key for c in left], [c.request_sha256 for c in left],
            [c.response for c in left])}
        fresh |= now
        taken = [c.key for c in left if c.key not in now]
        if taken:
            # A new statement sees what the transactions the claim waited for committed.
            earlier.update((r["key"], Claim(r["key"], r["request_sha256"], r["response"]))
                           for r in await conn.fetch(EARLIER, workspace_id, env, taken))
        left = [c for c in left if c.key not in fresh and c.key not in earlier]
    return fresh, earlier


async def prune(conn: asyncpg.Connection, older_than_hours: int, *, chunk: int, rounds: int) -> int:
    """Forget keys past the window: at most `rounds` statements of `chunk` rows each, so neither a statement
    nor a run holds the job for long; returns how many were deleted (chunk * rounds: more may be left)."""
    total = 0
    for _ in range(rounds):
        done = await conn.execute(PRUNE, older_than_hours, chunk)
        deleted = int(done.split()[-1])
        total += deleted
        if deleted < chunk:
            break
    return total
