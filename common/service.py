"""The one shape of a long-lived task: `start()` begins its work in the background and returns at once,
`await stop()` ends it and returns when nothing of it runs any more. Actors, the supervisor, the job
scheduler and the data-source runner all have it; app/server.py starts them in cleanup contexts and
stops them in reverse order. `Timer` is the one periodic loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from common.outages import POSTGRES, POSTGRES_UNREACHABLE, Outages

log = logging.getLogger("tally.service")


class Service(Protocol):
    def start(self) -> None: ...

    async def stop(self) -> None: ...


class Timer:
    """Calls `job` every `seconds` (the first call at once unless `delay_first`) in one task. A failing
    call is logged and the next one runs on time; stop() cancels the task and waits for it. With `outages`,
    a call that failed because PostgreSQL is unreachable is reported there instead (one line per outage,
    not a traceback per round)."""

    def __init__(self, name: str, seconds: float, job: Callable[[], Awaitable[object]], *,
                 delay_first: bool = False, outages: Outages | None = None) -> None:
        self.name = name
        self.seconds = seconds
        self.job = job
        self.delay_first = delay_first
        self.outages = outages
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"timer:{self.name}")

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _loop(self) -> None:
        if self.delay_first:
            await asyncio.sleep(self.seconds)
        while True:
            try:
                await self.job()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.outages is not None and isinstance(exc, POSTGRES_UNREACHABLE):
                    self.outages.down(POSTGRES, exc, "background jobs and the analytics mirror wait")
                else:
                    log.exception("timer job failed name=%s; it runs again in %gs", self.name, self.seconds)
            await asyncio.sleep(self.seconds)
