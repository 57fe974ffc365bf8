"""Builds the application: settings, pools and actors live in cleanup contexts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from aiohttp import web
from redis.asyncio import Redis

from actors.supervisor import Supervisor
from actors.workspace import PartitionCache, WorkspaceActor
from app.appkeys import KEYS, LIMITER, POOL, REDIS, SETTINGS, SUPERVISOR
from app.auth import keyed_middleware
from app.embedded import EmbeddedPostgres
from app.keys import KeyCache
from app.middlewares import error_middleware, metrics_middleware
from app.ratelimit import MemoryLimiter, RedisLimiter
from app.routes import setup_routes
from app.settings import Settings
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
    app[POOL] = pool
    app[PARTITION_CACHE] = PartitionCache()
    await _ensure_partitions_ahead(app)
    timer = asyncio.create_task(_partition_timer(app))
    try:
        yield
    finally:
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
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


async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
    url = app[SETTINGS].redis_url
    redis = Redis.from_url(url) if url else None
    app[REDIS] = redis
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
    }

    def factory(key):
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


def init_app(settings: Settings) -> web.Application:
    app = web.Application(
        middlewares=[metrics_middleware, error_middleware, keyed_middleware], client_max_size=MAX_BODY
    )
    app[SETTINGS] = settings
    app.cleanup_ctx.append(database_ctx)
    app.cleanup_ctx.append(redis_ctx)
    app.cleanup_ctx.append(actors_ctx)
    setup_routes(app)
    return app
