"""Segment write keys: generation, hashing, and a short-lived lookup cache of the source they open.

Like API keys, only a SHA-256 of a write key is stored (data_sources.write_key_hash); a generated key
carries 192 bits of randomness. Cache entries live `key_cache_seconds`, so pausing or deleting a source
reaches every process within that.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

import asyncpg
from aiohttp import web

from storage import segment as store

MAX_WRITE_KEY = 200


def generate() -> str:
    return secrets.token_urlsafe(24)


def hash_write_key(raw: str) -> bytes:
    return hashlib.sha256(raw.encode()).digest()


def from_basic_auth(header: str) -> str | None:
    """The user name of `Authorization: Basic base64(writeKey:)`; None when the header is not Basic."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[0] or None


@dataclass(frozen=True, slots=True)
class SegmentSource:
    id: str
    workspace_id: int
    env: str
    status: str
    plan: str
    custom_limits: dict


class WriteKeyCache:
    def __init__(self, pool: asyncpg.Pool, ttl: float, max_entries: int = 50_000) -> None:
        self._pool = pool
        self._ttl = ttl
        self._max = max_entries
        self._entries: dict[bytes, tuple[float, SegmentSource | None]] = {}

    async def lookup(self, raw: str) -> SegmentSource | None:
        if not raw or len(raw) > MAX_WRITE_KEY:
            return None
        digest = hash_write_key(raw)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        async with self._pool.acquire() as conn:
            row = await store.source_by_write_key(conn, digest)
        info = None
        if row is not None and hmac.compare_digest(row["write_key_hash"], digest):
            info = SegmentSource(id=row["id"], workspace_id=row["workspace_id"], env=row["env"],
                                 status=row["status"], plan=row["plan"], custom_limits=row["rate_limits"] or {})
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[digest] = (now + self._ttl, info)
        return info


WRITE_KEYS: web.AppKey[WriteKeyCache] = web.AppKey("segment_write_keys", WriteKeyCache)
