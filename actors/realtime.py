"""Sliding-window realtime state per site, fed by the site actor after each commit.

Per-second buckets (events, pageviews, pageviews per page key) over the last hour, the last event time
of each session, and the 20 newest events. In memory by default; in Redis when configured, so that
every process answers with the whole service's traffic. GET /api/analytics/realtime reads only this;
snapshots are plain data (RealtimeSnapshot), which app/views/realtime.py renders as JSON.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass

import orjson
from redis.asyncio import Redis

from common.outages import REDIS, REDIS_UNREACHABLE, DependencyDown, Outages, ask_redis
from common.redis_scripts import REALTIME_SUM

MAX_WINDOW = 3600
RECENT = 20
TOP_PAGES = 10
PAGEVIEW = "pageview"
_PAGE = re.compile(r"([^?#]*)(?:\?[^#]*)?(#!?/[^?]+)?", re.S)


def page_key(path: str) -> str:
    """The page a path counts under in every page list: without query string or fragment but with a hash
    route (`/app#/settings`), as storage.clickhouse_schema.PAGE_KEY derives it ('' when nothing is left)."""
    m = _PAGE.match(path)
    return m[1] + (m[2] or "") if m else ""


@dataclass(frozen=True, slots=True)
class LiveEvent:
    id: str
    name: str
    path: str | None
    country: str | None
    session_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class RealtimeSnapshot:
    active_visitors: int
    pageviews_per_minute: float
    events_per_minute: float
    top_pages: list[tuple[str, int]]  # (page key, pageviews), most first
    recent: list[LiveEvent]  # newest first


def seconds(now_ms: int, window: int) -> tuple[int, int]:
    """The window as whole seconds, the current one included: (its first second, the ms it ends before).
    The counts come from per-second buckets, so the active visitors and recent events are taken over the
    same seconds, and an event is in all of them or in none."""
    now_sec = now_ms // 1000
    return now_sec - window + 1, (now_sec + 1) * 1000


def summary(events: int, pageviews: int, pages: Counter, visitors: int, recent: list[LiveEvent],
            window: int) -> RealtimeSnapshot:
    per_minute = 60 / window
    # Ties by page, so memory and Redis (whose hashes have no order) answer alike.
    top = sorted(pages.items(), key=lambda kc: (-kc[1], kc[0]))[:TOP_PAGES]
    return RealtimeSnapshot(visitors, round(pageviews * per_minute, 2), round(events * per_minute, 2), top,
                            recent)


class _SiteWindow:
    __slots__ = ("buckets", "last_trim", "recent", "sessions")

    def __init__(self) -> None:
        self.last_trim = 0
        self.buckets: dict[int, list] = {}  # second -> [events, pageviews, Counter(page key)]
        self.sessions: dict[str, int] = {}  # session id -> last event ms
        self.recent: deque[LiveEvent] = deque(maxlen=RECENT)


class MemoryRealtime:
    def __init__(self) -> None:
        self._sites: dict[str, _SiteWindow] = {}

    async def record(self, site_id: str, events: list[LiveEvent]) -> None:
        win = self._sites.setdefault(site_id, _SiteWindow())
        newest = 0
        for e in events:
            bucket = win.buckets.setdefault(e.at_ms // 1000, [0, 0, Counter()])
            bucket[0] += 1
            if e.name == PAGEVIEW:
                bucket[1] += 1
                if page := page_key(e.path or ""):
                    bucket[2][page] += 1
            win.sessions[e.session_id] = max(win.sessions.get(e.session_id, 0), e.at_ms)
            win.recent.append(e)
            newest = max(newest, e.at_ms)
        self._trim(win, newest)

    @staticmethod
    def _trim(win: _SiteWindow, now_ms: int) -> None:
        """Once a minute, forget what fell out of the largest window."""
        if now_ms - win.last_trim < 60_000:
            return
        win.last_trim = now_ms
        oldest = now_ms // 1000 - MAX_WINDOW
        for sec in [s for s in win.buckets if s < oldest]:
            del win.buckets[sec]
        horizon = now_ms - MAX_WINDOW * 1000
        win.sessions = {k: t for k, t in win.sessions.items() if t > horizon}

    async def snapshot(self, site_id: str, now_ms: int, window: int) -> RealtimeSnapshot:
        win = self._sites.get(site_id)
        if win is None:
            return summary(0, 0, Counter(), 0, [], window)
        first, until_ms = seconds(now_ms, window)
        events = pageviews = 0
        pages: Counter = Counter()
        for sec, (n, pv, paths) in win.buckets.items():
            if first <= sec < until_ms // 1000:
                events += n
                pageviews += pv
                pages.update(paths)
        since_ms = first * 1000
        visitors = sum(1 for t in win.sessions.values() if since_ms <= t < until_ms)
        recent = sorted((e for e in reversed(win.recent) if since_ms <= e.at_ms < until_ms), key=lambda e: -e.at_ms)
        return summary(events, pageviews, pages, visitors, recent, window)


def _key(site_id: str, part: str) -> str:
    return f"tally:rt:{site_id}:{part}"


class RedisRealtime:
    def __init__(self, redis: Redis, outages: Outages) -> None:
        self._redis = redis
        self._sum = redis.register_script(REALTIME_SUM)
        self._outages = outages

    async def record(self, site_id: str, events: list[LiveEvent]) -> None:
        try:
            # Bounded: a stalled Redis would hold the flush slot for the client's socket timeout (5 s) per batch.
            await ask_redis(self._outages, self._record(site_id, events))
        except DependencyDown:
            pass  # down: the live view misses these events, as when the update fails
        except REDIS_UNREACHABLE as exc:  # a timeout too
            # The events are stored; a lost realtime update only dims the live view for a minute.
            self._outages.down(REDIS, exc, "the realtime view misses the events stored meanwhile")

    async def _record(self, site_id: str, events: list[LiveEvent]) -> None:
        # Counted here first, so a batch costs a few commands rather than several per event.
        ttl = MAX_WINDOW + 120
        counts: Counter[tuple[str, str]] = Counter()  # (bucket key, field)
        last_seen: dict[str, int] = {}
        for e in events:
            bucket = _key(site_id, f"b:{e.at_ms // 1000}")
            counts[bucket, "e"] += 1
            if e.name == PAGEVIEW:
                counts[bucket, "pv"] += 1
                if page := page_key(e.path or ""):
                    counts[bucket, "p:" + page] += 1
            last_seen[e.session_id] = max(e.at_ms, last_seen.get(e.session_id, 0))
        newest = max(last_seen.values())
        sessions, recent = _key(site_id, "sessions"), _key(site_id, "recent")
        async with self._redis.pipeline(transaction=False) as pipe:
            for (bucket, field), n in counts.items():
                pipe.hincrby(bucket, field, n)
            for bucket in {bucket for bucket, _ in counts}:
                pipe.expire(bucket, ttl)
            pipe.zadd(sessions, last_seen, gt=True)
            pipe.lpush(recent, *(orjson.dumps([e.id, e.name, e.path, e.country, e.session_id, e.at_ms])
                                 for e in events[-RECENT:]))
            pipe.ltrim(recent, 0, RECENT - 1)
            pipe.zremrangebyscore(sessions, "-inf", newest - MAX_WINDOW * 1000)
            pipe.expire(sessions, ttl)
            pipe.expire(recent, ttl)
            await pipe.execute()

    async def snapshot(self, site_id: str, now_ms: int, window: int) -> RealtimeSnapshot:
        return await ask_redis(self._outages, self._snapshot(site_id, now_ms, window))

    async def _snapshot(self, site_id: str, now_ms: int, window: int) -> RealtimeSnapshot:
        first, until_ms = seconds(now_ms, window)
        since_ms = first * 1000
        async with self._redis.pipeline(transaction=False) as pipe:
            await self._sum(args=[_key(site_id, "b:"), first, until_ms // 1000 - 1], client=pipe)
            pipe.zcount(_key(site_id, "sessions"), since_ms, f"({until_ms}")
            pipe.lrange(_key(site_id, "recent"), 0, RECENT - 1)
            totals, visitors, raw_recent = await pipe.execute()
        events, pageviews = int(totals[0]), int(totals[1])
        pages: Counter = Counter()
        for field, value in zip(totals[2::2], totals[3::2], strict=True):
            name = field.decode()
            # Keyed again: a process from before this rule may have counted full paths in the hour's buckets.
            if name.startswith("p:") and (page := page_key(name[2:])):
                pages[page] += int(value)
        visitors = int(visitors)
        recent = [LiveEvent(*orjson.loads(raw)) for raw in raw_recent]
        recent = sorted((e for e in recent if since_ms <= e.at_ms < until_ms), key=lambda e: -e.at_ms)
        return summary(events, pageviews, pages, visitors, recent, window)


def make_realtime(redis: Redis | None, outages: Outages) -> MemoryRealtime | RedisRealtime:
    return RedisRealtime(redis, outages) if redis is not None else MemoryRealtime()
