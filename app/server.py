"""Builds the application: settings, pools and actors live in cleanup contexts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from aiohttp import web
from redis.asyncio import Redis

from actors.analytics_mirror import Mirror
from actors.scheduler import Scheduler
from actors.site import SITE_RUNTIME, SiteActor
from actors.supervisor import Supervisor
from actors.workspace import PartitionCache, WorkspaceActor
from app import dashboard_session
from app.appkeys import (
    ANALYTICS,
    DATABASE_DSN,
    KEYS,
    LIMITER,
    MIRROR,
    POOL,
    REDIS,
    REPORT_POOL,
    SCHEDULER,
    SETTINGS,
    SUPERVISOR,
)
from app.auth import keyed_middleware
from app.embedded import EmbeddedPostgres
from app.keys import KeyCache
from app.middlewares import error_middleware, metrics_middleware, nosniff
from app.ratelimit import MemoryLimiter, RedisLimiter
from app.reports import schedule as report_schedule
from app.routes import setup_routes
from app.same_origin import same_origin_middleware
from app.segment import upkeep as segment_upkeep
from app.settings import Settings
from app.sources import runner as source_runner
from app.views.analytics_events import EXPORT_SLOTS, ExportSlots
from storage.clickhouse import AnalyticsStore, open_store
from storage.db import create_pool
from storage.migrate import migrate

log = logging.getLogger("tally.server")

PARTITION_CACHE: web.AppKey[PartitionCache] = web.AppKey("partitions")
MAX_BODY = 8 * 1024 * 1024


async def database_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    embedded = None
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = await asyncio.to_thread(embedded.start)
    pool = await create_pool(dsn, max_size=settings.pool_max)
    async with pool.acquire() as conn:
        await migrate(conn)
    report_pool = await create_pool(dsn, min_size=0, max_size=settings.report_pool_max)
    app[POOL] = pool
    app[REPORT_POOL] = report_pool
    app[DATABASE_DSN] = dsn
    app[PARTITION_CACHE] = PartitionCache()
    await _ensure_partitions_ahead(app)
    timer = asyncio.create_task(_partition_timer(app))
    try:
        yield
    finally:
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        await report_pool.close()
        await pool.close()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def _ensure_partitions_ahead(app: web.Application) -> None:
    now = datetime.now(UTC)
    months = {now, now + timedelta(days=32), now + timedelta(days=64)}
    await app[PARTITION_CACHE].ensure(app[POOL], months)


async def _partition_timer(app: web.Application) -> None:
    while True:
        await asyncio.sleep(6 * 3600)
        try:
            await _ensure_partitions_ahead(app)
        except Exception:
            log.exception("creating partitions ahead failed; will retry")


def open_analytics(settings: Settings) -> AnalyticsStore:
    """Blocking: the analytics store of these settings (embedded chDB unless TALLY_ANALYTICS_URL is set)."""
    return open_store(url=settings.analytics_url, path=settings.analytics_path,
                      database=settings.analytics_database, cluster=settings.analytics_cluster,
                      max_threads=settings.analytics_max_threads, max_memory_mb=settings.analytics_max_memory_mb)


def analytics_ctx_for(shared: AnalyticsStore | None):
    async def analytics_ctx(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        store = shared or await asyncio.to_thread(open_analytics, settings)
        app[ANALYTICS] = store
        mirror = Mirror(app[POOL], store, interval=settings.mirror_interval_ms / 1000, batch=settings.mirror_batch)
        app[MIRROR] = mirror
        mirror.start()
        try:
            yield
        finally:
            await mirror.stop()
            with contextlib.suppress(Exception):  # best effort: what stays in the outbox goes next start
                await mirror.catch_up()
            if shared is None:
                await asyncio.to_thread(store.close)

    return analytics_ctx


async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
    redis = app[REDIS]
    app[LIMITER] = RedisLimiter(redis) if redis else MemoryLimiter()
    try:
        yield
    finally:
        if redis is not None:
            await redis.aclose()


async def actors_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool, partitions = app[POOL], app[PARTITION_CACHE]
    tuning = {
        "max_batch": settings.batch_max,
        "capacity": settings.mailbox_events,
        "linger": settings.batch_linger_ms / 1000,
        "max_inflight": settings.flushes_in_flight,
    }

    def factory(key):
        if key[0] == "site":
            return SiteActor(key, pool, partitions, app[SITE_RUNTIME], **tuning)
        if key[0] == "ws":
            return WorkspaceActor(key, pool, partitions, **tuning)
        raise KeyError(key)

    supervisor = Supervisor(factory, idle_seconds=settings.actor_idle_seconds)
    supervisor.start()
    app[SUPERVISOR] = supervisor
    app[KEYS] = KeyCache(pool, settings.key_cache_seconds)
    try:
        yield
    finally:
        # Runs after aiohttp stopped accepting and finished in-flight requests: drain and flush.
        await supervisor.close()


async def scheduler_ctx(app: web.Application) -> AsyncIterator[None]:
    """Background jobs; areas register theirs in JOB_REGISTRARS."""
    scheduler = Scheduler(app[POOL])
    for register in JOB_REGISTRARS:
        register(app, scheduler)
    app[SCHEDULER] = scheduler
    if app[SETTINGS].run_scheduler:
        scheduler.start()
    try:
        yield
    finally:
        await scheduler.stop()


# Each entry: (app, scheduler) -> None, calling scheduler.every(...).
JOB_REGISTRARS = [source_runner.register, report_schedule.register, segment_upkeep.register]


def init_app(settings: Settings, *, analytics: AnalyticsStore | None = None) -> web.Application:
    """`analytics`: an already open store to share (tests; chDB opens one data directory per process)."""
    app = web.Application(
        middlewares=[metrics_middleware, error_middleware, same_origin_middleware, keyed_middleware],
        client_max_size=MAX_BODY,
    )
    app[SETTINGS] = settings
    app[EXPORT_SLOTS] = ExportSlots()
    app.on_response_prepare.append(nosniff)
    # The client connects lazily; created here because the session storage needs it at set-up.
    app[REDIS] = Redis.from_url(settings.redis_url) if settings.redis_url else None
    dashboard_session.install(app, settings, app[REDIS])
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(analytics_ctx_for(analytics))
    app.cleanup_ctx.append(redis_ctx)
    app.cleanup_ctx.append(actors_ctx)
    app.cleanup_ctx.append(scheduler_ctx)
    app.cleanup_ctx.append(source_runner.sources_ctx)  # stops data-source runs before the scheduler/pool
    setup_routes(app)
    return app
