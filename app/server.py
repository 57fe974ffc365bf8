"""Builds the application. Every long-lived object (pools, Redis, the site runtime, actors, the source
runner, the scheduler) is created in a cleanup context below and closed in reverse order, as in
aiohttp-demos `polls`; route setup (app/routes.py) only adds routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
from aiohttp import web
from clickhouse_connect.driver.exceptions import ClickHouseError
from redis.asyncio import Redis

from actors.analytics_mirror import Mirror
from actors.site import SiteActor
from actors.supervisor import Supervisor
from actors.workspace import PartitionCache, WorkspaceActor
from app import dashboard_session, idempotency
from app.appkeys import (
    ANALYTICS,
    DATABASE_DSN,
    KEYS,
    LIMITER,
    METRICS,
    MIRROR,
    OUTAGES,
    PARTITION_CACHE,
    POOL,
    REDIS,
    REPORT_POOL,
    REPORT_SLOTS,
    SCHEDULER,
    SETTINGS,
    SITE_RUNTIME,
    SUPERVISOR,
    WARMER,
    WRITE_POOL,
)
from app.auth import keyed_middleware, refuse_undeclared
from app.crypto import CredentialBox
from app.dashboard_warmer import DashboardWarmer
from app.embedded import EmbeddedPostgres
from app.keys import KeyCache
from app.middlewares import close_when_told, nosniff, root_middleware, site_api_middleware
from app.ratelimit import MemoryLimiter, RedisLimiter
from app.reports import schedule as report_schedule
from app.reports.slots import ReportSlots
from app.routes import setup_routes
from app.scheduler import Scheduler
from app.segment import upkeep as segment_upkeep
from app.segment.writekeys import WRITE_KEYS, WriteKeyCache
from app.settings import Settings
from app.site_runtime import make_runtime
from app.sources import runner as source_runner
from app.sources.netguard import NetGuard
from app.startup import StartupError, check_redis, clickhouse_reason, connecting_to_postgres, server_place
from app.useragent import warm_up
from app.views.analytics_events import EXPORT_SLOTS, ExportSlots
from common.metrics import Metrics
from common.outages import Outages
from common.service import Timer
from storage import analytics_mirror
from storage.clickhouse import AnalyticsStore, StoreUnopenable, open_store
from storage.db import close_pool, connect, create_pool, create_writer_pool, maintaining_pool
from storage.migrate import migrate

log = logging.getLogger("tally.server")

MAX_BODY = 8 * 1024 * 1024
PARTITIONS_AHEAD_SECONDS = 6 * 3600
WARM_CHECK_SECONDS = 300  # how often the dashboard warmer looks whether a day has begun
EMBEDDED_CHECK_SECONDS = 5  # how often the embedded PostgreSQL is looked at (and started again if it died)


async def database_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    embedded = watchdog = None
    opened: list[asyncpg.Pool] = []
    dsn = settings.database_url
    if dsn is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        dsn = await asyncio.to_thread(embedded.start)

        async def revive() -> None:
            """A server that died is started again (until then requests needing it answer 503); the pools'
            connections to the dead one are replaced at once rather than each failing one request."""
            if await asyncio.to_thread(embedded.revive):
                for opened_pool in opened:
                    await opened_pool.expire_connections()

        watchdog = Timer("embedded-postgres", EMBEDDED_CHECK_SECONDS, revive, delay_first=True)
        watchdog.start()
    try:
        async with connecting_to_postgres(dsn, embedded_in=embedded and embedded.data_dir):
            pool = await create_pool(dsn, min_size=min(2, settings.pool_max), max_size=settings.pool_max, bounded=True)
        # asyncpg logs a traceback for every failed attempt to reconnect its floor: one line per outage.
        pools = [pool]  # this app's pools with a floor (other apps' pools log through the same logger)
        opened.append(pool)
        pool_log = logging.getLogger("asyncpg.pool")
        floor = app[OUTAGES].log_filter("Failed to restore the pool connection floor", "requests needing it answer 503",
                                        applies=lambda: maintaining_pool() in pools)
        pool_log.addFilter(floor)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
            report_pool = await create_pool(dsn, min_size=0, max_size=settings.report_pool_max)
            write_pool = await create_writer_pool(
                dsn, min_size=min(settings.flushes_in_flight, settings.write_pool_max),
                max_size=settings.write_pool_max)
            pools.append(write_pool)
            opened += [report_pool, write_pool]
            app[POOL] = pool
            app[REPORT_POOL] = report_pool
            app[REPORT_SLOTS] = ReportSlots(settings.report_pool_max)
            app[WRITE_POOL] = write_pool
            app[DATABASE_DSN] = dsn
            app[PARTITION_CACHE] = PartitionCache()
            await _ensure_partitions_ahead(app)
            # Months ahead get their partition well before their first event; a failed round retries next time.
            timer = Timer("partitions-ahead", PARTITIONS_AHEAD_SECONDS, lambda: _ensure_partitions_ahead(app),
                          delay_first=True, outages=app[OUTAGES])
            timer.start()
            try:
                yield
            finally:
                await timer.stop()
                await close_pool(write_pool)
                await close_pool(report_pool)
        finally:
            await close_pool(pool)
            pool_log.removeFilter(floor)
    finally:
        if embedded is not None:
            await watchdog.stop()
            await asyncio.to_thread(embedded.stop)


async def _ensure_partitions_ahead(app: web.Application) -> None:
    now = datetime.now(UTC)
    months = {now, now + timedelta(days=32), now + timedelta(days=64)}
    await app[PARTITION_CACHE].ensure(app[POOL], months)


def open_analytics(settings: Settings) -> AnalyticsStore:
    """Blocking: the analytics store of these settings (embedded chDB unless TALLY_ANALYTICS_URL is set). A
    server that does not answer is a StartupError; its folder the callers have made (startup.prepare_folders)."""
    try:
        return open_store(url=settings.analytics_url, path=settings.analytics_path,
                          database=settings.analytics_database, cluster=settings.analytics_cluster,
                          max_threads=settings.analytics_max_threads, max_memory_mb=settings.analytics_max_memory_mb,
                          read_timeout_seconds=settings.analytics_read_timeout_seconds)
    except StoreUnopenable as exc:  # it holds only copies of PostgreSQL's events, which a rebuild copies again
        raise StartupError(f"{exc}; move that folder aside (or restore it) and run `tally analytics rebuild`, "
                           "which copies every event again from PostgreSQL") from None
    except ClickHouseError as exc:
        if settings.analytics_url is None:
            raise
        raise StartupError(f"cannot use the ClickHouse server at {server_place(settings.analytics_url)} "
                           f"(TALLY_ANALYTICS_URL): {clickhouse_reason(exc)}") from None


def analytics_ctx_for(shared: AnalyticsStore | None):
    """The analytics store (or a shared one, which its owner closes) and the mirror that feeds it."""

    async def analytics_ctx(app: web.Application) -> AsyncIterator[None]:
        settings = app[SETTINGS]
        store = shared or await asyncio.to_thread(open_analytics, settings)
        owner = None  # the connection holding this process's claim on the database (embedded store)
        try:
            if shared is None and store.embedded:
                owner = await connect(app[DATABASE_DSN])
                await analytics_mirror.claim_embedded_store(owner)
            async with app[POOL].acquire() as conn:  # a store mirroring another database is refused
                adopted = await analytics_mirror.check_origin(conn, store)
        except BaseException:
            if owner is not None:
                await owner.close()
            if shared is None:
                await asyncio.to_thread(store.close)
            raise
        if adopted is not None:
            log.info("the analytics store now records that it mirrors the database %s", adopted)
        app[ANALYTICS] = store
        if store.refill_needed:
            async with app[POOL].acquire() as conn:
                queued = await analytics_mirror.refill(conn)
            log.warning("analytics store emptied for its new layout; %d events queued to mirror again", queued)
        mirror = Mirror(app[POOL], store, interval=settings.mirror_interval_ms / 1000, batch=settings.mirror_batch,
                        metrics=app[METRICS], outages=app[OUTAGES])
        app[MIRROR] = mirror
        mirror.start()
        warmer = app[WARMER] = DashboardWarmer(store, app[POOL], mirror)
        warming = Timer("dashboard-warmer", WARM_CHECK_SECONDS, warmer.warm, delay_first=True, outages=app[OUTAGES])
        warming.start()
        try:
            yield
        finally:
            await warming.stop()
            with contextlib.suppress(Exception):  # best effort: a process killed instead loses a tick's reads
                await warmer.save()
            await mirror.stop()
            with contextlib.suppress(Exception):  # best effort: what stays in the outbox goes next start
                await mirror.catch_up()
            if shared is None:
                await asyncio.to_thread(store.close)
            if owner is not None:
                await owner.close()

    return analytics_ctx


async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
    """The Redis client (connecting lazily) and the rate limiter, which uses it when configured. Short
    timeouts: an unreachable Redis must answer a request quickly (with a fallback or a 503)."""
    url = app[SETTINGS].redis_url
    redis = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5) if url else None
    app[REDIS] = redis
    app[LIMITER] = RedisLimiter(redis, app[OUTAGES]) if redis else MemoryLimiter()
    try:
        if redis is not None:
            await check_redis(redis, url, app[OUTAGES])
        yield
    finally:
        if redis is not None:
            await redis.aclose()


async def site_runtime_ctx(app: web.Application) -> AsyncIterator[None]:
    """Sessions, realtime window, salts and GeoIP shared by site ingestion, its actors and realtime."""
    runtime = make_runtime(app[SETTINGS], app[REDIS], app[OUTAGES])
    app[SITE_RUNTIME] = runtime
    warm_up()  # build the User-Agent parser now, not on the first event
    try:
        yield
    finally:
        if runtime.geoip is not None:
            runtime.geoip.close()


async def actors_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool, write_pool = app[POOL], app[WRITE_POOL]
    partitions, runtime = app[PARTITION_CACHE], app[SITE_RUNTIME]
    tuning = {
        "max_batch": settings.batch_max,
        "capacity": settings.mailbox_events,
        "linger": settings.batch_linger_ms / 1000,
        "max_inflight": settings.flushes_in_flight,
        "commit_timeout": settings.commit_timeout_seconds,
        "metrics": app[METRICS],
        "outages": app[OUTAGES],
    }

    def factory(key):
        if key[0] == "site":
            return SiteActor(key, write_pool, partitions, runtime.sessions, runtime.realtime, **tuning)
        if key[0] == "ws":
            return WorkspaceActor(key, write_pool, partitions, **tuning)
        raise KeyError(key)

    supervisor = Supervisor(factory, idle_seconds=settings.actor_idle_seconds, metrics=app[METRICS])
    supervisor.start()
    app[SUPERVISOR] = supervisor
    app[KEYS] = KeyCache(pool, settings.key_cache_seconds)
    app[WRITE_KEYS] = WriteKeyCache(pool, settings.key_cache_seconds)
    try:
        yield
    finally:
        # Runs after aiohttp stopped accepting and finished in-flight requests: drain and flush.
        await supervisor.stop()


async def sources_ctx(app: web.Application) -> AsyncIterator[None]:
    """The data-source runner; closed after the scheduler stopped, before the pool closes."""
    settings = app[SETTINGS]
    guard = NetGuard.from_settings(settings, database_dsn=app[DATABASE_DSN])
    runner = source_runner.SourceRunner(app[POOL], CredentialBox(settings.secret), settings.source_timeout_seconds,
                                        guard, app[METRICS])
    app[source_runner.RUNNER] = runner
    runner.start()
    try:
        yield
    finally:
        await runner.stop()


async def scheduler_ctx(app: web.Application) -> AsyncIterator[None]:
    """Background jobs; areas register theirs in JOB_REGISTRARS."""
    scheduler = Scheduler(app[DATABASE_DSN], app[OUTAGES])
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
JOB_REGISTRARS = [source_runner.register, report_schedule.register, segment_upkeep.register,
                  idempotency.register]


def init_app(settings: Settings, *, analytics: AnalyticsStore | None = None) -> web.Application:
    """The root application (operations, pages, public dashboards) with the keyed API mounted at /v1 and
    the site API at /api, each a sub-application with its own middlewares. `analytics`: an already open
    store to share (tests; chDB opens one data directory per process)."""
    # One middleware layer per application (app/middlewares.py): root (metrics, keyed errors, the pages'
    # session), /v1 (key, scope, rate limit, path ids) and /api (site errors, same-origin, path ids,
    # session). Errors in /v1 take the root's keyed shape; keyed_middleware adds the rate-limit headers.
    app = web.Application(client_max_size=MAX_BODY)
    sessions = dashboard_session.middleware(dashboard_session.storage_for(app, settings))
    app.middlewares.append(root_middleware(sessions, settings.db_request_timeout_seconds))
    v1 = web.Application(middlewares=[keyed_middleware])
    api = web.Application(middlewares=[site_api_middleware(sessions)])
    metrics = Metrics()
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[OUTAGES] = Outages(metrics)
    app[EXPORT_SLOTS] = ExportSlots()
    app.on_response_prepare.append(nosniff)
    app.on_response_prepare.append(close_when_told)
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(analytics_ctx_for(analytics))
    app.cleanup_ctx.append(redis_ctx)
    app.cleanup_ctx.append(site_runtime_ctx)
    app.cleanup_ctx.append(actors_ctx)
    app.cleanup_ctx.append(sources_ctx)
    app.cleanup_ctx.append(scheduler_ctx)  # stops first: no job starts while the others close
    setup_routes(app, v1, api)
    refuse_undeclared(v1)  # fail closed: a /v1 route without a declared scope stops start-up
    app.add_subapp("/v1", v1)
    app.add_subapp("/api", api)
    return app
