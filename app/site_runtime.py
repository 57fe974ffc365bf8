"""What site ingestion and the realtime view share for the life of the app: the settings, the open
sessions and realtime window the site actors feed, the daily salt, the GeoIP reader, a few-seconds
cache of site rows and the clock. Created once, in a cleanup context of app/server.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
from redis.asyncio import Redis

from actors.realtime import MemoryRealtime, RedisRealtime, make_realtime
from actors.sessions import MemorySessions, RedisSessions, make_sessions
from app.enrich import DailySalt, GeoIP, ip_salt, open_geoip
from app.settings import Settings
from common.outages import Outages
from common.ttl_cache import TTLCache

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


class SiteCache(TTLCache["SiteInfo | None"]):
    """Site rows by id for ingestion and realtime, a few seconds fresh (misses cached too)."""

    def __init__(self, seconds: float = SITE_CACHE_SECONDS) -> None:
        super().__init__(seconds)

    @staticmethod
    def info(row: asyncpg.Record | None) -> SiteInfo | None:
        if row is None:
            return None
        return SiteInfo(row["id"], row["workspace_id"], row["domain"], row["verification_token"],
                        row["verified_at"] is not None)

    def put_row(self, site_id: str, row: asyncpg.Record | None) -> SiteInfo | None:
        return self.put(site_id, self.info(row))


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


def make_runtime(settings: Settings, redis: Redis | None, outages: Outages) -> SiteRuntime:
    return SiteRuntime(settings, make_sessions(redis, outages), make_realtime(redis, outages),
                       DailySalt(redis, outages), open_geoip(settings.geoip_db), ip_salt(settings.secret))
