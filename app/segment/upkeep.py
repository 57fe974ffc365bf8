"""Start-up wiring of the Segment API: the write-key cache and the job that ends the dedupe window."""

from __future__ import annotations

import logging

from aiohttp import web

from actors.scheduler import Scheduler
from app.appkeys import POOL, SETTINGS
from app.segment.writekeys import WRITE_KEYS, WriteKeyCache
from storage import segment as store

log = logging.getLogger("tally.segment")

JOB = "segment_dedupe_prune"
JOB_SECONDS = 3600.0
# messageIds are remembered at least this long: Segment's SDKs retry for minutes, replays of a day-old
# batch are still caught, and pruning hourly keeps every id for 48 to 49 hours.
DEDUPE_HOURS = 48


def register(app: web.Application, scheduler: Scheduler) -> None:
    """JOB_REGISTRARS entry."""
    pool = app[POOL]
    app[WRITE_KEYS] = WriteKeyCache(pool, app[SETTINGS].key_cache_seconds)

    async def prune() -> None:
        async with pool.acquire() as conn:
            deleted = await store.prune_messages(conn, DEDUPE_HOURS)
        if deleted:
            log.info("segment dedupe window pruned message_ids=%d", deleted)

    scheduler.every(JOB, JOB_SECONDS, prune)
