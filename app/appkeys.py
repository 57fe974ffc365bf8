"""Typed keys for what the application holds (aiohttp AppKey)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
from aiohttp import web
from redis.asyncio import Redis

if TYPE_CHECKING:
    from actors.analytics_mirror import Mirror
    from actors.supervisor import Supervisor
    from actors.workspace import PartitionCache
    from app.dashboard_warmer import DashboardWarmer
    from app.keys import KeyCache
    from app.ratelimit import MemoryLimiter, RedisLimiter
    from app.reports.slots import ReportSlots
    from app.scheduler import Scheduler
    from app.settings import Settings
    from app.site_runtime import SiteRuntime
    from common.metrics import Metrics
    from common.outages import Outages
    from storage.clickhouse import AnalyticsStore

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool")
# Custom-SQL and built-in report runs: a small pool of its own (settings.report_pool_max).
REPORT_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("report_pool")
# Report runs each workspace has going in this process (app.reports.slots).
REPORT_SLOTS: web.AppKey[ReportSlots] = web.AppKey("report_slots")
# The actors' writes: cached plans, no reset on release (storage.db.create_writer_pool).
WRITE_POOL: web.AppKey[asyncpg.Pool] = web.AppKey("write_pool")
# The DSN the pool uses (the embedded server's when DATABASE_URL is unset): data sources may not reach it.
DATABASE_DSN: web.AppKey[str] = web.AppKey("database_dsn", str)
REDIS: web.AppKey[Redis | None] = web.AppKey("redis")
SUPERVISOR: web.AppKey[Supervisor] = web.AppKey("supervisor")
KEYS: web.AppKey[KeyCache] = web.AppKey("keys")
LIMITER: web.AppKey[MemoryLimiter | RedisLimiter] = web.AppKey("limiter")
SCHEDULER: web.AppKey[Scheduler] = web.AppKey("scheduler")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
OUTAGES: web.AppKey[Outages] = web.AppKey("outages")
SITE_RUNTIME: web.AppKey[SiteRuntime] = web.AppKey("site_runtime")
PARTITION_CACHE: web.AppKey[PartitionCache] = web.AppKey("partitions")
ANALYTICS: web.AppKey[AnalyticsStore] = web.AppKey("analytics")
MIRROR: web.AppKey[Mirror] = web.AppKey("mirror")
WARMER: web.AppKey[DashboardWarmer] = web.AppKey("warmer")


def root_app(request: web.Request) -> web.Application:
    """The root application, which holds every key above (app/server.py sets them all there). Hot paths
    read from it directly: request.config_dict builds a chain of the applications on every access and,
    inside /v1 or /api, misses (a KeyError) in the sub-application before it reaches the root."""
    return request.match_info.apps[0]
