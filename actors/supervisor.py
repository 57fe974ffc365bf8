"""Starts actors on demand, restarts crashed ones, stops idle ones, drains all on shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

from actors.base import Actor, Overloaded
from common.metrics import Metrics
from common.service import Timer

log = logging.getLogger("tally.supervisor")


class Supervisor:
    def __init__(self, factory: Callable[[Hashable], Actor], *, idle_seconds: float,
                 metrics: Metrics | None = None) -> None:
        self._factory = factory
        self.metrics = metrics or Metrics()
        self.idle_seconds = idle_seconds
        self.actors: dict[Hashable, Actor] = {}
        self.closing = False
        self._reaper = Timer("actor-reaper", max(idle_seconds / 4, 0.05), self._reap_idle, delay_first=True)
        self._stopping: set[asyncio.Task] = set()  # idle actors draining their last messages

    def start(self) -> None:
        self._reaper.start()

    def actor(self, key: Hashable) -> Actor:
        actor = self.actors.get(key)
        if actor is None:
            if self.closing:
                raise Overloaded("shutting down")
            actor = self._factory(key)
            self.actors[key] = actor
            self._spawn(actor)
            self.metrics.actors_running.labels(actor.kind).inc()
        return actor

    def _spawn(self, actor: Actor) -> None:
        task = actor.start()
        task.add_done_callback(lambda t, a=actor: self._on_exit(a, t))

    def _on_exit(self, actor: Actor, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is None:
            return
        if self.actors.get(actor.key) is not actor:
            return
        log.error("actor crashed, restarting kind=%s key=%s error=%r", actor.kind, actor.key, task.exception())
        self.metrics.actor_restarts.labels(actor.kind).inc()
        # Same actor object, same mailbox: queued messages are served by the new task.
        self._spawn(actor)

    async def _reap_idle(self) -> None:
        now = asyncio.get_running_loop().time()
        for key, actor in list(self.actors.items()):
            # No await between the check and the removal: a submit cannot slip in between.
            if actor.idle() and now - actor.last_active > self.idle_seconds:
                del self.actors[key]
                stopping = asyncio.create_task(actor.stop())
                self._stopping.add(stopping)
                stopping.add_done_callback(self._stopping.discard)
                self.metrics.actors_running.labels(actor.kind).dec()

    async def stop(self) -> None:
        """Refuse new work, let every actor drain its mailbox and flush, then return."""
        self.closing = True
        await self._reaper.stop()
        await asyncio.gather(*(actor.stop() for actor in self.actors.values()), *self._stopping,
                             return_exceptions=True)
        self.actors.clear()
