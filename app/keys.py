"""API keys: generation, hashing, and a short-lived lookup cache.

Only a SHA-256 of a key is stored. Keys carry 256 bits of randomness, so a fast hash is enough;
the lookup is by hash and the final comparison is constant-time. Cache entries live for
`key_cache_seconds` (2 s by default), so a revocation reaches every process within that.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from common.ttl_cache import TTLCache
from storage import workspaces as store
from storage.ids import new_id

KEY_RE = re.compile(r"^tally_(live|test)_sk_[A-Za-z0-9_-]{20,100}\Z")
SCOPES = ("read", "write", "admin")


def hash_key(raw: str) -> bytes:
    return hashlib.sha256(raw.encode()).digest()


def generate(env: str) -> str:
    return f"tally_{env}_sk_{secrets.token_urlsafe(32)}"


@dataclass(frozen=True, slots=True)
class KeyInfo:
    id: str
    workspace_id: int
    env: str
    scopes: frozenset[str]
    plan: str
    custom_limits: dict
    expires_at: datetime | None

    def usable(self) -> bool:
        return self.expires_at is None or self.expires_at > datetime.now(UTC)


async def create_key(
    conn: asyncpg.Connection, *, workspace: str, scopes: list[str], test: bool, name: str,
    expires_at: datetime | None,
) -> tuple[str, str]:
    """Returns (key id, raw key). The raw key is shown once and never stored."""
    env = "test" if test else "live"
    raw = generate(env)
    key_id = new_id("key")
    async with conn.transaction():
        workspace_id = await store.ensure_workspace(conn, workspace)
        await store.insert_key(
            conn, key_id=key_id, workspace_id=workspace_id, env=env, name=name, scopes=scopes,
            key_hash=hash_key(raw), prefix=raw[:18], expires_at=expires_at,
        )
    return key_id, raw


class KeyCache:
    def __init__(self, pool: asyncpg.Pool, ttl: float, max_entries: int = 50_000) -> None:
        self._pool = pool
        self._entries: TTLCache[KeyInfo | None] = TTLCache(ttl, max_entries)

    async def lookup(self, raw: str) -> KeyInfo | None:
        if not KEY_RE.match(raw):
            return None
        digest = hash_key(raw)
        found, info = self._entries.get(digest)
        if not found:
            info = self._entries.put(digest, await self._load(digest))
        return info if info is not None and info.usable() else None

    async def _load(self, digest: bytes) -> KeyInfo | None:
        async with self._pool.acquire() as conn:
            row = await store.key_by_hash(conn, digest)
        if row is None or row["revoked_at"] is not None:
            return None
        if not hmac.compare_digest(row["key_hash"], digest):
            return None
        return KeyInfo(
            id=row["id"], workspace_id=row["workspace_id"], env=row["env"],
            scopes=frozenset(row["scopes"]), plan=row["plan"], custom_limits=row["rate_limits"] or {},
            expires_at=row["expires_at"],
        )

    def forget_all(self) -> None:
        self._entries.clear()
