"""The mirror from PostgreSQL (the system of record) to the analytics store.

Committed events are listed in `analytics_outbox` by a trigger in their own transaction (migration 0017).
A round takes a batch of outbox rows, reads their events, inserts them into ClickHouse and deletes
exactly those outbox rows, in one PostgreSQL transaction that also holds an advisory lock, so rounds of
all processes run one at a time. A crash before the COMMIT leaves the rows listed and the next round
writes them again; the store's ReplacingMergeTree tables collapse such copies by event id and every read
uses FINAL, so nothing counts twice. Erasures are queued the same way (`analytics_erasures`) and applied
in a round after its inserts, so a batch read before an erasure committed cannot bring the user back.

`rebuild` derives the store from the `events` table alone: every column the reads need (page key,
referrer host, visitor hash) is computed here, from the stored event, by the same functions; the
store's materialized views derive the session-day rows (`site_sessions`) and the day rows (`site_days`)
from those inserts, and reads count ended days again (`site_day_counts`, emptied here) when they need them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from storage.clickhouse import KEYED_COLUMNS, SITE_COLUMNS, AnalyticsStore

_LOCK = (7_264_002, 1)  # advisory lock of mirror rounds (migrate.py uses 7_264_001)

EVENT_FIELDS = (
    "e.id, e.workspace_id, e.env, e.site_id, e.name, e.user_id, e.anonymous_id, e.session_id, e.properties::text "
    "AS properties, e.path, e.referrer, e.country, e.ip_hash, e.ts, e.browser, e.browser_version, e.os, "
    "e.os_version, e.device, e.utm_source, e.utm_medium, e.utm_campaign, e.utm_term, e.utm_content, e.source, "
    "e.channel, e.region, e.city"
)
_TAKE = "SELECT seq, workspace_id, env, ts, id FROM analytics_outbox ORDER BY seq LIMIT $1 FOR UPDATE"
_EVENTS_OF = (
    f"SELECT {EVENT_FIELDS} FROM analytics_outbox o JOIN events e ON e.workspace_id = o.workspace_id "
    "AND e.env = o.env AND e.ts = o.ts AND e.id = o.id WHERE o.seq = ANY($1::bigint[])"
)
_DONE = "DELETE FROM analytics_outbox WHERE seq = ANY($1::bigint[])"
_ERASURES = "SELECT seq, workspace_id, env, user_id FROM analytics_erasures ORDER BY seq FOR UPDATE"
_ERASED = "DELETE FROM analytics_erasures WHERE seq = ANY($1::bigint[])"
_DIMENSIONS = ("browser", "browser_version", "os", "os_version", "device", "utm_source", "utm_medium",
               "utm_campaign", "utm_term", "utm_content", "source", "channel", "region", "city")


# --- keys derived from a stored event (the rules of migration 0004's retired SQL functions) -----------

def page_key(path: str | None) -> str:
    """The path without query string or fragment; '' when none."""
    return (path or "").split("#", 1)[0].split("?", 1)[0]


def referrer_host(referrer: str | None) -> str:
    """The lower-cased host of a referrer without "www."; '' when empty. The site's own domain is excluded
    at read time (a site's domain may change)."""
    h = (referrer or "").lower()
    if not h:
        return ""
    if "://" in h:
        h = h[h.index("://") + 3:]
    h = h.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    return h[4:] if h.startswith("www.") else h


def key_hash(value: str | None) -> int:
    """A visitor or session key as a UInt64 (0: none): grouping by it is far cheaper than by the string."""
    if not value:
        return 0
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little") or 1


def _row_site(r) -> list:
    return [
        r["site_id"], r["ts"], r["id"], r["name"], key_hash(r["session_id"]), key_hash(r["ip_hash"]),
        page_key(r["path"]), r["referrer"] or "", referrer_host(r["referrer"]), r["country"] or "",
        *[r[d] or "" for d in _DIMENSIONS], r["properties"] or "{}",
    ]


def _row_keyed(r) -> list:
    actor = r["user_id"] if r["user_id"] is not None else (
        "anon:" + r["anonymous_id"] if r["anonymous_id"] is not None else "")
    return [r["workspace_id"], r["env"], r["name"], r["ts"], r["id"], r["user_id"] or "", actor,
            r["properties"] or "{}"]


async def write_events(store: AnalyticsStore, records: Iterable) -> int:
    """Insert stored events into the store; the row building runs in the worker thread with the insert, so
    a 20,000-event batch does not hold the event loop."""
    return await asyncio.to_thread(_write_sync, store, records)


def _write_sync(store: AnalyticsStore, records: Iterable) -> int:
    site, keyed = [], []
    for r in records:
        (site if r["site_id"] is not None else keyed).append(r)
    store.insert_sync("site_events", [_row_site(r) for r in site], SITE_COLUMNS)
    store.insert_sync("keyed_events", [_row_keyed(r) for r in keyed], KEYED_COLUMNS)
    return len(site) + len(keyed)


# --- rounds -----------------------------------------------------------------------------------------

async def mirror_round(conn: asyncpg.Connection, store: AnalyticsStore, limit: int) -> int:
    """Mirror up to `limit` outbox rows and apply queued erasures; returns the outbox rows handled."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", *_LOCK)
        taken = await conn.fetch(_TAKE, limit)
        if taken:
            seqs = [r["seq"] for r in taken]
            await write_events(store, await conn.fetch(_EVENTS_OF, seqs))
            await conn.execute(_DONE, seqs)
        erasures = await conn.fetch(_ERASURES)
        for e in erasures:
            await store.delete_where("keyed_events", "workspace_id = {w:UInt64} AND env = {e:String} "
                                     "AND user_id = {u:String}",
                                     {"w": e["workspace_id"], "e": e["env"], "u": e["user_id"]})
        if erasures:
            await conn.execute(_ERASED, [e["seq"] for e in erasures])
    return len(taken)


async def queue_erasure(conn: asyncpg.Connection, workspace_id: int, env: str, user_id: str) -> None:
    """Called inside the erasure's transaction."""
    await conn.execute("INSERT INTO analytics_erasures (workspace_id, env, user_id) VALUES ($1, $2, $3)",
                       workspace_id, env, user_id)


# --- status and rebuild -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Status:
    pending: int  # committed events not yet in the store
    lag_seconds: float  # age of the oldest of them (0 when none)
    postgres_events: int
    store_site_events: int
    store_keyed_events: int

    def json(self) -> dict:
        return {"pending": self.pending, "lag_seconds": round(self.lag_seconds, 3),
                "postgres_events": self.postgres_events,
                "analytics_events": self.store_site_events + self.store_keyed_events,
                "analytics_site_events": self.store_site_events,
                "analytics_keyed_events": self.store_keyed_events}


async def lag(conn: asyncpg.Connection) -> tuple[int, float]:
    row = await conn.fetchrow(
        "SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(queued_at)), 0)::float8 AS lag "
        "FROM analytics_outbox"
    )
    return row["n"], row["lag"]


async def status(conn: asyncpg.Connection, store: AnalyticsStore) -> Status:
    pending, age = await lag(conn)
    pg = await conn.fetchval("SELECT count(*) FROM events")
    site = (await store.query(f"SELECT count() FROM {store.table('site_events')} FINAL"))[0][0]
    keyed = (await store.query(f"SELECT count() FROM {store.table('keyed_events')} FINAL"))[0][0]
    return Status(pending, age, pg, site, keyed)


async def rebuild(conn: asyncpg.Connection, store: AnalyticsStore, since: datetime | None = None,
                  chunk: int = 50_000) -> int:
    """Re-mirror every event (or those at or after `since`) from PostgreSQL; returns the events written.
    Takes the mirror lock, so no round runs meanwhile; the outbox keeps what commits during the rebuild."""
    for name in ("site_sessions", "site_days", "site_day_counts", "site_events", "keyed_events"):
        if since is None:
            await store.command(f"TRUNCATE TABLE IF EXISTS {store.local_table(name)}{store.on_cluster}")
        elif name in ("site_sessions", "site_days", "site_day_counts"):  # whole days: derived again below
            await store.delete_where(name, "day >= toDate({s:DateTime64(6, 'UTC')})", {"s": since})
        else:
            await store.delete_where(name, "ts >= {s:DateTime64(6, 'UTC')}", {"s": since})
    written = 0
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", *_LOCK)
        erased = await conn.fetch(_ERASURES)
        if erased:  # nothing of theirs is left in PostgreSQL to copy
            await conn.execute(_ERASED, [e["seq"] for e in erased])
        where, args = ("WHERE e.ts >= $1", [since]) if since is not None else ("", [])
        batch: list = []
        async for record in conn.cursor(f"SELECT {EVENT_FIELDS} FROM events e {where}", *args, prefetch=chunk):
            batch.append(record)
            if len(batch) >= chunk:
                written += await write_events(store, batch)
                batch = []
        written += await write_events(store, batch)
    if since is not None:  # the sessions and visitors of the day of `since` also hold events from before it
        await asyncio.to_thread(store.backfill_sessions_sync, since)
        await asyncio.to_thread(store.backfill_days_sync, since)
    return written
