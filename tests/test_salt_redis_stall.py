"""The daily salt in a Redis that stalls (it neither answers nor refuses): the day's first site event of a
process waited for it as long as the Redis client allowed (its socket timeout, 5 s in the server). Now it
waits at most common.outages.FALLBACK_WAIT_SECONDS, then takes a salt of this process for the day, and asks
Redis again once it answers."""

from __future__ import annotations

import asyncio
from datetime import date

from redis.asyncio import Redis

from app.enrich import DailySalt
from common import outages
from tests.test_dependency_outages import HoldingRelay, own_redis  # noqa: F401 (a fixture)

DAY = date(2026, 3, 1)


async def test_a_stalled_redis_does_not_hold_the_days_salt(own_redis, monkeypatch):  # noqa: F811
    monkeypatch.setattr(outages, "PROBE_SECONDS", 60.0)
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    # A socket timeout past the guard below: only the salt's own bound can end the wait in time.
    redis = Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=120)
    down = outages.Outages()
    fallbacks = down.metrics.dependency_fallbacks.labels("salt")
    salt = DailySalt(redis, down)
    try:
        relay.holding = b"tally:visitor-salt:"
        own = await asyncio.wait_for(salt.get(DAY), 30)  # a guard against a hang, not a timing
        assert await salt.get(DAY) == own  # the same visitor keeps one key while Redis is down
        assert relay.held == 1  # the second did not wait for Redis
        assert fallbacks._value.get() == 2

        relay.holding = b""
        monkeypatch.setattr(outages, "PROBE_SECONDS", 0.0)
        shared = await salt.get(DAY)  # Redis answers again: the salt every process shares from now on
        direct = Redis.from_url(own_redis.url)
        try:
            assert shared == await direct.get(f"tally:visitor-salt:{DAY.isoformat()}")
        finally:
            await direct.aclose()
        assert fallbacks._value.get() == 2
    finally:
        await redis.aclose()
        await relay.cut()
