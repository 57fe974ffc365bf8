"""The process's analytics mirror: a timer that keeps ClickHouse within about a round of PostgreSQL, and
`catch_up()` for reads and erasures that must see everything committed before they began.

Rounds run one at a time (an asyncio lock here, an advisory lock across processes in storage/), each on a
pooled connection; a failing store is retried on the next tick and the outbox keeps the events meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg

from app import metrics
from storage import analytics_mirror as mirror
from storage.clickhouse import AnalyticsStore

log = logging.getLogger("tally.mirror")


class Mirror:
    def __init__(self, pool: asyncpg.Pool, store: AnalyticsStore, *, interval: float, batch: int) -> None:
        self.pool, self.store = pool, store
        self.interval, self.batch = interval, batch
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self.last_error: str | None = None

    async def catch_up(self) -> int:
        """Mirror everything committed before this call (and apply queued erasures); returns rows moved."""
        moved = 0
        async with self._lock, self.pool.acquire() as conn:
            while True:
                started = time.perf_counter()
                n = await mirror.mirror_round(conn, self.store, self.batch)
                moved += n
                if n:
                    metrics.MIRROR_EVENTS.inc(n)
                    metrics.MIRROR_ROUND_SECONDS.observe(time.perf_counter() - started)
                if n < self.batch:
                    return moved

    async def lag(self) -> tuple[int, float]:
        async with self.pool.acquire() as conn:
            pending, age = await mirror.lag(conn)
        metrics.MIRROR_LAG.set(age)
        metrics.MIRROR_PENDING.set(pending)
        return pending, age

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="analytics-mirror")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.catch_up()
                self.last_error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the outbox keeps the events; the next tick retries
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("analytics mirror round failed; will retry")
            await asyncio.sleep(self.interval)
