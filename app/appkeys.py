"""Typed keys for what the application holds (aiohttp AppKey)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web
from redis.asyncio import Redis

if TYPE_CHECKING:
    from actors.analytics_mirror import Mirror
    from actors.scheduler import Scheduler
    from actors.supervisor import Supervisor
    from app.keys import KeyCache
    from app.ratelimit import MemoryLimiter, RedisLimiter
    from app.settings import Settings
    from storage.clickhouse import AnalyticsStore

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool")
# Custom-SQL and built-in report runs: a small pool of its own (settings.report_pool_max).
REPORT_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("report_pool")
# The DSN the pool uses (the embedded server's when DATABASE_URL is unset): data sources may not reach it.
DATABASE_DSN: web.AppKey[str] = web.AppKey("database_dsn", str)
REDIS: web.AppKey[Redis | None] = web.AppKey("redis")
SUPERVISOR: web.AppKey[Supervisor] = web.AppKey("supervisor")
KEYS: web.AppKey[KeyCache] = web.AppKey("keys")
LIMITER: web.AppKey[MemoryLimiter | RedisLimiter] = web.AppKey("limiter")
SCHEDULER: web.AppKey[Scheduler] = web.AppKey("scheduler")
ANALYTICS: web.AppKey[AnalyticsStore] = web.AppKey("analytics")
MIRROR: web.AppKey[Mirror] = web.AppKey("mirror")
