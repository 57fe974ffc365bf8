"""Per-key rolling-window rate limits (sliding window counter over 1 s and 60 s buckets).

In process by default; one atomic Lua script in Redis when REDIS_URL is set, so that every
process shares the allowance. While Redis is unreachable each process counts on its own (a fallback,
counted in /metrics): the allowance is then per process, but no request fails for it.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from redis.asyncio import Redis

from app.plans import Limits
from common.outages import FALLBACK_WAIT_SECONDS, REDIS, REDIS_UNREACHABLE, Outages
from common.redis_scripts import RATE_LIMIT

WINDOWS_MS = (1_000, 60_000)
_SECOND, _MINUTE = WINDOWS_MS


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    reset: int  # unix seconds
    retry_after: int

    def headers(self) -> dict[str, str]:
        headers = {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Reset": str(self.reset),
        }
        if not self.allowed:
            headers["Retry-After"] = str(self.retry_after)
        return headers


def _verdict(limits: Limits, estimates: list[float], allowed: bool, now_ms: int) -> Verdict:
    """Report the window closest to exhaustion (the second on a tie); its bucket end is the reset time."""
    used = 1 if allowed else 0
    per_second, per_minute = limits
    left_second = max(0, math.floor(per_second - estimates[0] - used))
    left_minute = max(0, math.floor(per_minute - estimates[1] - used))
    if (left_minute / per_minute if per_minute else 0) < (left_second / per_second if per_second else 0):
        limit, remaining, window = per_minute, left_minute, _MINUTE
    else:
        limit, remaining, window = per_second, left_second, _SECOND
    retry_after = 0
    if not allowed:
        # A full minute window frees up as its bucket rolls over; a full second window at once.
        if estimates[1] + 1 > per_minute:
            retry_after = max(1, math.ceil(((now_ms // _MINUTE + 1) * _MINUTE - now_ms) / 1000))
        else:
            retry_after = 1
    return Verdict(allowed, limit, remaining, (now_ms // window + 1) * window // 1000, retry_after)


class MemoryLimiter:
    def __init__(self) -> None:
        # bucket -> [second, its count, previous second's count, minute, its count, previous minute's count];
        # one flat list per bucket because this runs on every keyed request.
        self._counts: dict[str, list[int]] = {}
        self._last_sweep = 0

    async def hit(self, bucket: str, limits: Limits) -> Verdict:
        now_ms = int(time.time() * 1000)
        if now_ms - self._last_sweep >= 60_000:
            self._sweep(now_ms)
        second, minute = now_ms // _SECOND, now_ms // _MINUTE
        slot = self._counts.get(bucket)
        if slot is None:
            slot = self._counts[bucket] = [second, 0, 0, minute, 0, 0]
        if slot[0] != second:
            slot[2] = slot[1] if slot[0] == second - 1 else 0
            slot[0], slot[1] = second, 0
        if slot[3] != minute:
            slot[5] = slot[4] if slot[3] == minute - 1 else 0
            slot[3], slot[4] = minute, 0
        per_second = slot[2] * (_SECOND - (now_ms - second * _SECOND)) / _SECOND + slot[1]
        per_minute = slot[5] * (_MINUTE - (now_ms - minute * _MINUTE)) / _MINUTE + slot[4]
        allowed = per_second + 1 <= limits[0] and per_minute + 1 <= limits[1]
        if allowed:
            slot[1] += 1
            slot[4] += 1
        return _verdict(limits, [per_second, per_minute], allowed, now_ms)

    def _sweep(self, now_ms: int) -> None:
        """Forget buckets idle for two minutes, so per-IP entries cannot pile up."""
        self._last_sweep = now_ms
        minute = now_ms // _MINUTE
        stale = [bucket for bucket, slot in self._counts.items() if minute - slot[3] > 2]
        for bucket in stale:
            del self._counts[bucket]


class RedisLimiter:
    """Hits made during one event-loop turn go to Redis together, as one call of the script: under load a
    turn holds dozens of keyed requests, and a redis-py command with its round trip costs more than the
    rest of such a request (one call per hit halved the rate of POST /v1/events)."""

    def __init__(self, redis: Redis, outages: Outages) -> None:
        self._script = redis.register_script(RATE_LIMIT)
        self._waiting: list[tuple[str, Limits, asyncio.Future[Verdict]]] = []
        self._sending: set[asyncio.Task] = set()
        self._outages = outages
        self._fallback = MemoryLimiter()

    async def hit(self, bucket: str, limits: Limits) -> Verdict:
        if not self._outages.worth_trying(REDIS):
            self._outages.fallback("rate_limits", None)
            return await self._fallback.hit(bucket, limits)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Verdict] = loop.create_future()
        self._waiting.append((bucket, limits, future))
        if len(self._waiting) == 1:
            # A task starts on the next turn, once every request of this one has added its hit.
            task = loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        try:
            verdict = await future
        except REDIS_UNREACHABLE as exc:
            self._outages.fallback("rate_limits", exc)
            return await self._fallback.hit(bucket, limits)
        self._outages.up(REDIS)
        return verdict

    async def _send(self) -> None:
        hits, self._waiting = self._waiting, []
        now_ms = int(time.time() * 1000)
        keys: list[str] = []
        args: list[int] = [len(hits), len(WINDOWS_MS)]
        for bucket, limits, _ in hits:
            for limit, window in zip(limits, WINDOWS_MS, strict=True):
                idx = now_ms // window
                keys += [f"tally:rl:{bucket}:{window}:{idx}", f"tally:rl:{bucket}:{window}:{idx - 1}"]
                args += [limit, window, now_ms - idx * window]
        try:
            # A stalled Redis would hold every waiting request for the client's socket timeout (5 s).
            async with asyncio.timeout(FALLBACK_WAIT_SECONDS):
                reply = await self._script(keys=keys, args=args)
        except asyncio.CancelledError:  # shutting down: no request may wait for an answer forever
            for _, _, future in hits:
                future.cancel()
            raise
        except Exception as exc:  # every waiting request fails as its own call would have
            for _, _, future in hits:
                if not future.done():
                    future.set_exception(exc)
            return
        per_hit = len(WINDOWS_MS) + 1
        for i, (_, limits, future) in enumerate(hits):
            if not future.done():  # its request may have gone away meanwhile
                part = reply[i * per_hit:(i + 1) * per_hit]
                future.set_result(_verdict(limits, [float(x) for x in part[:-1]], bool(int(part[-1])), now_ms))
