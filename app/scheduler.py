"""Periodic background jobs (report delivery, data-source syncs, upkeep).

Every process runs the timers; a job runs only in the process that wins its PostgreSQL advisory
lock for that round, so one runner acts across processes. Jobs persist their own "next run" state,
which is how they catch up after downtime without acting twice.

The locks are held on one connection of the scheduler's own, outside the pool, so a long job does not
keep a pool connection from ingestion and requests. Should that connection drop, PostgreSQL releases
its locks; the jobs tolerate a second runner (they claim work with leases and row locks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from common.outages import Outages
from common.service import Timer
from storage import job_locks
from storage.db import connect

log = logging.getLogger("tally.scheduler")

Job = Callable[[], Awaitable[None]]


@dataclass
class _Entry:
    name: str
    seconds: float
    job: Job
    lock_key: int
    running: bool = field(default=False)  # in this process: the lock's session is shared by all jobs


class Scheduler:
    def __init__(self, dsn: str, outages: Outages | None = None) -> None:
        self._dsn = dsn
        self._outages = outages  # PostgreSQL unreachable: one line per outage, not a traceback per round
        self._entries: list[_Entry] = []
        self._timers: list[Timer] = []
        self._conn: asyncpg.Connection | None = None
        self._conn_lock = asyncio.Lock()  # one statement at a time on the lock connection

    def every(self, name: str, seconds: float, job: Job) -> None:
        """Register `job` to run about every `seconds`; call before start()."""
        self._entries.append(_Entry(name, seconds, job, job_locks.job_lock_key(name)))

    def start(self) -> None:
        self._timers = [Timer(f"job:{e.name}", e.seconds, lambda e=e: self._run_locked(e),
                              outages=self._outages) for e in self._entries]
        for timer in self._timers:
            timer.start()

    async def stop(self) -> None:
        for timer in self._timers:
            await timer.stop()
        self._timers = []
        if self._conn is not None:
            await self._conn.close()  # releases any lock still held
            self._conn = None

    async def run_now(self, name: str) -> bool:
        """Run one job once under its lock (used by tests and on start); False if another process holds it."""
        entry = next(e for e in self._entries if e.name == name)
        return await self._run_locked(entry)

    async def _locking(self, statement: Callable[[asyncpg.Connection], Awaitable[bool | None]]) -> bool | None:
        async with self._conn_lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await connect(self._dsn)
            return await statement(self._conn)

    async def _run_locked(self, entry: _Entry) -> bool:
        if entry.running:
            return False
        entry.running = True
        try:
            if not await self._locking(lambda conn: job_locks.try_lock(conn, entry.lock_key)):
                return False
            try:
                await entry.job()
            finally:
                try:
                    await self._locking(lambda conn: job_locks.unlock(conn, entry.lock_key))
                except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                    self._conn = None  # the connection is gone, and its locks with it
            return True
        finally:
            entry.running = False
