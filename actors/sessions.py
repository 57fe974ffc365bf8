"""Open visitor sessions: visitor key -> (session id, last event time).

A session ends after 30 minutes without events; the next event of that visitor opens a new one. The
state lives in process memory, or in Redis when configured so that every process continues the same
sessions. Times come from the events (server receive times), so tests move a clock, not the wall.

While Redis is unreachable, sessions are assigned in process memory (counted as fallbacks): a visit
then may start a new session where Redis would have continued one, but no event is refused.
"""

from __future__ import annotations

from redis.asyncio import Redis

from common.outages import REDIS, REDIS_UNREACHABLE, Outages
from common.redis_scripts import SESSION_ASSIGN
from storage.ids import new_id

SESSION_TIMEOUT_MS = 30 * 60 * 1000



def new_session_id() -> str:
    return new_id("ses")


class MemorySessions:
    def __init__(self, timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms
        self._open: dict[tuple[str, str], list] = {}  # (site, visitor) -> [session id, last ms]
        self._last_sweep = 0

    async def assign(self, site_id: str, visits: list[tuple[str, int]]) -> list[str]:
        """Session ids for (visitor key, event time ms) pairs, in order."""
        out = []
        for visitor, at in visits:
            entry = self._open.get((site_id, visitor))
            if entry is None or at - entry[1] > self.timeout_ms:
                entry = self._open[(site_id, visitor)] = [new_session_id(), at]
            else:
                entry[1] = max(entry[1], at)
            out.append(entry[0])
        if visits:
            self._sweep(max(at for _, at in visits))
        return out

    def _sweep(self, now_ms: int) -> None:
        """Forget ended sessions once a minute, so memory follows the number of live visitors."""
        if now_ms - self._last_sweep < 60_000:
            return
        self._last_sweep = now_ms
        ended = [k for k, (_, last) in self._open.items() if now_ms - last > self.timeout_ms]
        for key in ended:
            del self._open[key]


class RedisSessions:
    def __init__(self, redis: Redis, outages: Outages, timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms
        self._redis = redis
        self._script = redis.register_script(SESSION_ASSIGN)
        self._outages = outages
        self._fallback = MemorySessions(timeout_ms)

    async def assign(self, site_id: str, visits: list[tuple[str, int]]) -> list[str]:
        if not visits:
            return []
        try:
            assigned = await self._assign(site_id, visits)
        except REDIS_UNREACHABLE as exc:
            self._outages.fallback("sessions", exc)
            return await self._fallback.assign(site_id, visits)
        self._outages.up(REDIS)
        return assigned

    async def _assign(self, site_id: str, visits: list[tuple[str, int]]) -> list[str]:
        # Keys outlive the timeout a little; the script compares times itself, so an injected clock works.
        ttl = self.timeout_ms + 5 * 60 * 1000
        keys = [f"tally:visit:{site_id}:{visitor}" for visitor, _ in visits]
        args: list[int | str] = [self.timeout_ms, ttl]
        for _, at in visits:
            args += [at, new_session_id()]
        replies = await self._script(keys=keys, args=args)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in replies]


def make_sessions(redis: Redis | None, outages: Outages) -> MemorySessions | RedisSessions:
    return RedisSessions(redis, outages) if redis is not None else MemorySessions()
