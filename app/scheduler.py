"""Periodic background jobs (report delivery, data-source syncs, upkeep).

Every process runs the timers; a job runs only in the process that wins its PostgreSQL advisory
lock for that round, so one runner acts across processes. Jobs persist their own "next run" state,
which is how they catch up after downtime without acting twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg

from storage import job_locks

log = logging.getLogger("tally.scheduler")

Job = Callable[[], Awaitable[None]]


@dataclass
class _Entry:
    name: str
    seconds: float
    job: Job
    lock_key: int


class Scheduler:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._entries: list[_Entry] = []
        self._tasks: list[asyncio.Task] = []

    def every(self, name: str, seconds: float, job: Job) -> None:
        """Register `job` to run about every `seconds`; call before start()."""
        self._entries.append(_Entry(name, seconds, job, job_locks.job_lock_key(name)))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(e), name=f"job:{e.name}") for e in self._entries]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def run_now(self, name: str) -> bool:
        """Run one job once under its lock (used by tests and on start); False if another process holds it."""
        entry = next(e for e in self._entries if e.name == name)
        return await self._run_locked(entry)

    async def _loop(self, entry: _Entry) -> None:
        while True:
            try:
                await self._run_locked(entry)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job failed name=%s", entry.name)
            await asyncio.sleep(entry.seconds)

    async def _run_locked(self, entry: _Entry) -> bool:
        async with self._pool.acquire() as conn:
            if not await job_locks.try_lock(conn, entry.lock_key):
                return False
            try:
                await entry.job()
            finally:
                await job_locks.unlock(conn, entry.lock_key)
        return True
