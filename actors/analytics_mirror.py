"""The process's analytics mirror: a timer that keeps ClickHouse within about a round of PostgreSQL, and
`catch_up()` for reads and erasures that must see everything committed before they began.

Rounds run one at a time (an asyncio lock here, an advisory lock across processes in storage/), each on a
pooled connection; a failing store is retried on the next tick and the outbox keeps the events meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from common.metrics import Metrics
from common.outages import POSTGRES, POSTGRES_UNREACHABLE, Outages
from common.service import Timer
from storage import analytics_mirror as mirror
from storage.clickhouse import AnalyticsStore

log = logging.getLogger("tally.mirror")

# How often a round also looks for an interrupted rebuild (one a killed CLI left behind, even while this
# server runs beside it on a ClickHouse server); the first round of a process always does.
RESUME_CHECK_SECONDS = 60.0


class Mirror:
    def __init__(self, pool: asyncpg.Pool, store: AnalyticsStore, *, interval: float, batch: int,
                 metrics: Metrics | None = None, outages: Outages | None = None) -> None:
        self.pool, self.store = pool, store
        self.interval, self.batch = interval, batch
        self.metrics = metrics or Metrics()
        self.outages = outages or Outages(self.metrics)
        self._lock = asyncio.Lock()
        self._next: asyncio.Future | None = None  # the catch-up that callers arriving now share (not yet started)
        self._timer = Timer("analytics-mirror", interval, self._round)
        self._running: asyncio.Future | None = None  # the timer's round (referenced: it may outlive a stop)
        self.last_error: str | None = None
        self._logged_error: str | None = None  # the failure last logged with its traceback, until a success
        self._next_resume_check = 0.0

    async def catch_up(self) -> int:
        """Mirror everything committed before this call (and apply queued erasures); returns rows moved.
        Callers that arrive while one runs share the next, which starts after all of them called: a dashboard
        opening with seven requests makes one or two catch-ups, not seven in a row."""
        running = self._next
        if running is None:
            self._next = running = asyncio.ensure_future(self._catch_up())

            def done(future: asyncio.Future) -> None:
                # One that failed before it started (no connection: PostgreSQL down) is not shared any more:
                # left in place, every later catch-up, the timer's rounds included, got its error for good.
                if self._next is future:
                    self._next = None
                if not future.cancelled():
                    future.exception()  # its failure is each waiting caller's; retrieved here for when none is left

            running.add_done_callback(done)
        return await asyncio.shield(running)  # one caller going away does not cancel the others' catch-up

    async def _catch_up(self) -> int:
        moved = 0
        async with self._lock, self.pool.acquire() as conn:
            self._next = None  # started: a caller from now on may have committed after its snapshot
            while True:
                started = time.perf_counter()
                n = await mirror.mirror_round(conn, self.store, self.batch)
                moved += n
                if n:
                    self.metrics.mirror_events.inc(n)
                    self.metrics.mirror_round_seconds.observe(time.perf_counter() - started)
                if n < self.batch:
                    return moved

    async def resume_interrupted(self) -> int:
        """Queue again what an interrupted rebuild took out of the store (storage's resume_interrupted)."""
        async with self.pool.acquire() as conn:
            queued = await mirror.resume_interrupted(conn)
        if queued:
            log.warning("an interrupted analytics rebuild left the store without %d events: queued to mirror "
                        "again", queued)
        return queued

    async def lag(self) -> tuple[int, float]:
        async with self.pool.acquire() as conn:
            pending, age = await mirror.lag(conn)
        self.metrics.mirror_lag.set(age)
        self.metrics.mirror_pending.set(pending)
        return pending, age

    def start(self) -> None:
        self._timer.start()

    async def stop(self) -> None:
        await self._timer.stop()

    async def _round(self) -> None:
        # A round runs to its end even when stop() cancels the timer (the shutdown's catch-up waits for it
        # on the lock). Cancelled inside its COPY, asyncpg's connection was left mid-protocol, the
        # rollback's error replaced the cancellation, this method logged it as a failed round, and the
        # timer never stopped: shutdown hung.
        self._running = asyncio.ensure_future(self._logged_round())
        await asyncio.shield(self._running)

    async def _logged_round(self) -> None:
        """A round of the timer. A round that fails because PostgreSQL is unreachable is reported to the
        outage book (one line per outage, another when it answers again); any other failure is logged with
        its traceback once, and the same failure again only when a round succeeded in between."""
        try:
            if time.monotonic() >= self._next_resume_check:
                self._next_resume_check = time.monotonic() + RESUME_CHECK_SECONDS
                await self.resume_interrupted()
            await self.catch_up()
        except Exception as exc:  # the outbox keeps the events; the next tick retries
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, POSTGRES_UNREACHABLE):
                self.outages.down(POSTGRES, exc, "the analytics mirror waits (committed events stay in its outbox)")
            elif error != self._logged_error:
                self._logged_error = error
                log.exception("analytics mirror round failed; will retry (the same failure is not logged again "
                              "until a round succeeds)")
            self.last_error = error
            return
        self.outages.up(POSTGRES)
        self.last_error = None
        if self._logged_error is not None:
            self._logged_error = None
            log.warning("analytics mirror rounds succeed again")
