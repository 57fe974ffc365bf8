"""Per-key rolling-window rate limits (sliding window counter over 1 s and 60 s buckets).

In process by default; one atomic Lua script in Redis when REDIS_URL is set, so that every
process shares the allowance.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from redis.asyncio import Redis

from app.plans import Limits
from app.redis_scripts import RATE_LIMIT

WINDOWS_MS = (1_000, 60_000)


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
    """Report the window closest to exhaustion; its bucket end is the reset time."""
    best = None
    for limit, window, estimate in zip(limits, WINDOWS_MS, estimates, strict=True):
        used = estimate + (1 if allowed else 0)
        remaining = max(0, math.floor(limit - used))
        reset_ms = (now_ms // window + 1) * window
        ratio = remaining / limit if limit else 0
        if best is None or ratio < best[0]:
            best = (ratio, limit, remaining, reset_ms)
    _, limit, remaining, reset_ms = best
    retry_after = 0
    if not allowed:
        # A full minute window frees up as its bucket rolls over; a full second window at once.
        minute, per_minute = WINDOWS_MS[1], limits[1]
        if estimates[1] + 1 > per_minute:
            retry_after = max(1, math.ceil(((now_ms // minute + 1) * minute - now_ms) / 1000))
        else:
            retry_after = 1
    return Verdict(allowed, limit, remaining, math.ceil(reset_ms / 1000), retry_after)


class MemoryLimiter:
    def __init__(self) -> None:
        # (bucket, window) -> [bucket index, current count, previous count]
        self._counts: dict[tuple[str, int], list[int]] = {}
        self._last_sweep = 0

    async def hit(self, bucket: str, limits: Limits) -> Verdict:
        now_ms = int(time.time() * 1000)
        self._sweep(now_ms)
        estimates = []
        slots = []
        for window in WINDOWS_MS:
            idx = now_ms // window
            slot = self._counts.get((bucket, window))
            if slot is None:
                slot = self._counts[(bucket, window)] = [idx, 0, 0]
            elif slot[0] != idx:
                slot[2] = slot[1] if slot[0] == idx - 1 else 0
                slot[1] = 0
                slot[0] = idx
            elapsed = now_ms - idx * window
            estimates.append(slot[2] * (window - elapsed) / window + slot[1])
            slots.append(slot)
        allowed = all(e + 1 <= lim for e, lim in zip(estimates, limits, strict=True))
        if allowed:
            for slot in slots:
                slot[1] += 1
        return _verdict(limits, estimates, allowed, now_ms)

    def _sweep(self, now_ms: int) -> None:
        """Forget buckets idle for two minutes, so per-IP entries cannot pile up."""
        if now_ms - self._last_sweep < 60_000:
            return
        self._last_sweep = now_ms
        stale = [k for k, slot in self._counts.items() if now_ms // k[1] - slot[0] > 2]
        for key in stale:
            del self._counts[key]


class RedisLimiter:
    def __init__(self, redis: Redis) -> None:
        self._script = redis.register_script(RATE_LIMIT)

    async def hit(self, bucket: str, limits: Limits) -> Verdict:
        now_ms = int(time.time() * 1000)
        keys: list[str] = []
        args: list[int] = [len(WINDOWS_MS)]
        for limit, window in zip(limits, WINDOWS_MS, strict=True):
            idx = now_ms // window
            keys += [f"tally:rl:{bucket}:{window}:{idx}", f"tally:rl:{bucket}:{window}:{idx - 1}"]
            args += [limit, window, now_ms - idx * window]
        reply = await self._script(keys=keys, args=args)
        estimates = [float(x) for x in reply[:-1]]
        return _verdict(limits, estimates, bool(int(reply[-1])), now_ms)
