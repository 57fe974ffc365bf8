"""The actor of one site: assigns sessions, COPYs the batch's events (the events triggers keep the
sessions table and the rollups in the same statement), then feeds the realtime window.

Process-wide state that must outlive an idle actor (open sessions, the realtime window, the site
cache, the clock) lives in SiteRuntime, created once per app.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
from aiohttp import web
from redis.asyncio import Redis
from redis.exceptions import RedisError

from actors.base import Actor, Message
from actors.realtime import LiveEvent, MemoryRealtime, RedisRealtime, make_realtime
from actors.sessions import MemorySessions, RedisSessions, make_sessions
from actors.workspace import PartitionCache
from app.enrich import DailySalt, GeoIP, ip_salt, open_geoip
from app.settings import Settings
from storage import events as event_store
from storage.events import COL

log = logging.getLogger("tally.site")

SITE_EVENTS = "site_events"
PAGEVIEW = "pageview"
SITE_CACHE_SECONDS = 5.0


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class SiteInfo:
    id: str
    workspace_id: int
    domain: str
    token: str
    verified: bool


class SiteCache:
    """Site rows by id for ingestion and realtime, a few seconds fresh (misses cached too)."""

    def __init__(self, seconds: float = SITE_CACHE_SECONDS) -> None:
        self.seconds = seconds
        self._rows: dict[str, tuple[float, SiteInfo | None]] = {}

    def get(self, site_id: str) -> tuple[bool, SiteInfo | None]:
        hit = self._rows.get(site_id)
        if hit is None or time.monotonic() - hit[0] > self.seconds:
            return False, None
        return True, hit[1]

    @staticmethod
    def info(row: asyncpg.Record | None) -> SiteInfo | None:
        if row is None:
            return None
        return SiteInfo(row["id"], row["workspace_id"], row["domain"], row["verification_token"],
                        row["verified_at"] is not None)

    def put(self, site_id: str, row: asyncpg.Record | None) -> SiteInfo | None:
        info = self.info(row)
        if len(self._rows) > 50_000:
            self._rows.clear()
        self._rows[site_id] = (time.monotonic(), info)
        return info

    def forget(self, site_id: str) -> None:
        self._rows.pop(site_id, None)


@dataclass
class SiteRuntime:
    settings: Settings
    sessions: MemorySessions | RedisSessions
    realtime: MemoryRealtime | RedisRealtime
    salt: DailySalt
    geoip: GeoIP | None
    ip_salt: bytes
    sites: SiteCache = field(default_factory=SiteCache)
    clock: Callable[[], datetime] = utcnow  # tests replace it to move time without sleeping


SITE_RUNTIME: web.AppKey[SiteRuntime] = web.AppKey("site_runtime")


def make_runtime(settings: Settings, redis: Redis | None) -> SiteRuntime:
    return SiteRuntime(settings, make_sessions(redis), make_realtime(redis), DailySalt(redis),
                       open_geoip(settings.geoip_db), ip_salt(settings.secret))


@dataclass(slots=True)
class SiteItem:
    record: tuple  # storage.events.EVENT_COLUMNS order; session_id None when to be assigned
    visitor: str  # daily visitor key (a hash), used only when the record has no session id


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


class SiteActor(Actor):
    kind = "site"

    def __init__(self, key: tuple[str, str], pool: asyncpg.Pool, partitions: PartitionCache,
                 runtime: SiteRuntime, **tuning) -> None:
        super().__init__(key, **tuning)
        self.site_id = key[1]
        self.pool = pool
        self.partitions = partitions
        self.runtime = runtime

    async def flush(self, batch: list[Message]) -> None:
        items: list[SiteItem] = [item for msg in batch for item in msg.items]
        records = await self._with_sessions(items)
        await self.partitions.ensure(self.pool, {r[COL["ts"]] for r in records})
        async with self.connection() as conn:
            # One statement: the events triggers keep rollups and sessions (migrations 0004 and 0010).
            await event_store.copy_events(conn, records)
        # Committed: only now may the realtime window show these events.
        await self._publish(records)

    async def _with_sessions(self, items: list[SiteItem]) -> list[tuple]:
        sid, ts = COL["session_id"], COL["ts"]
        missing = [i for i, item in enumerate(items) if item.record[sid] is None]
        records = [item.record for item in items]
        if not missing:
            return records
        try:
            assigned = await self.runtime.sessions.assign(
                self.site_id, [(items[i].visitor, _ms(items[i].record[ts])) for i in missing])
        except RedisError as exc:
            # A store error for the actor: the submitters get "store failed", the actor lives on.
            raise ConnectionError(f"session store unavailable: {exc}") from exc
        for i, session_id in zip(missing, assigned, strict=True):
            r = records[i]
            records[i] = (*r[:sid], session_id, *r[sid + 1:])
        return records

    async def _publish(self, records: list[tuple]) -> None:
        c = COL
        live = [LiveEvent(r[c["id"]], r[c["name"]], r[c["path"]], r[c["country"]], r[c["session_id"]],
                          _ms(r[c["ts"]])) for r in records]
        try:
            await self.runtime.realtime.record(self.site_id, live)
        except Exception:
            # The events are stored; a lost realtime update only dims the live view for a minute.
            log.exception("realtime update failed site=%s", self.site_id)
