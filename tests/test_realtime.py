"""GET /api/analytics/realtime, from the in-memory and the Redis-backed window."""

from __future__ import annotations

import dataclasses
import secrets
from datetime import timedelta

import asyncpg
import pytest
from redis.asyncio import Redis

from actors.realtime import LiveEvent, MemoryRealtime, RedisRealtime
from app.appkeys import SITE_RUNTIME
from common.outages import Outages
from tests.site_helpers import FakeClock, post_event, register_site

UA = "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"


@pytest.fixture(params=["memory", "redis"])
async def rt(request, make_client, settings, redis_url, login, workspace, database_url):
    extra = {"redis_url": redis_url} if request.param == "redis" else {}
    client = await make_client(dataclasses.replace(settings, **extra))
    clock = FakeClock()
    client.app[SITE_RUNTIME].clock = clock
    await login(the_client=client)
    site, _ = await register_site(database_url, workspace, verified=False)
    return client, clock, site


async def realtime(client, site: str, window: int | None = None) -> dict:
    query = f"?siteId={site}" + (f"&window={window}" if window else "")
    resp = await client.get("/api/analytics/realtime" + query)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_live_numbers(rt):
    client, clock, site = rt
    a = {"User-Agent": UA, "CF-IPCountry": "DE"}
    await post_event(client, {"s": site, "n": "pageview", "p": "/a", "sid": "v1"}, a)
    await post_event(client, {"s": site, "n": "pageview", "p": "/a", "sid": "v2"})
    clock.advance(timedelta(seconds=10))
    await post_event(client, {"s": site, "n": "pageview", "p": "/b", "sid": "v1"}, a)
    await post_event(client, {"s": site, "n": "signup", "p": "/b", "sid": "v1"}, a)

    live = await realtime(client, site)
    assert live["activeVisitors"] == 2
    assert live["pageviewsPerMinute"] == 3
    assert live["eventsPerMinute"] == 4
    assert live["topActivePages"] == [{"key": "/a", "count": 2}, {"key": "/b", "count": 1}]
    recent = live["recentEvents"]
    assert [e["name"] for e in recent] == ["signup", "pageview", "pageview", "pageview"][: len(recent)]
    assert len(recent) == 4
    assert set(recent[0]) == {"id", "name", "path", "country", "timestamp"}
    assert recent[0]["id"].startswith("evt_") and recent[0]["country"] == "DE" and recent[0]["path"] == "/b"
    assert recent[0]["timestamp"] >= recent[-1]["timestamp"]

    # Half a minute later the first two events fell out of a 15-second window.
    clock.advance(timedelta(seconds=5))
    live = await realtime(client, site, window=15)
    assert live["activeVisitors"] == 1
    assert live["eventsPerMinute"] == 8  # 2 events in 15 s
    assert live["pageviewsPerMinute"] == 4

    clock.advance(timedelta(seconds=60))
    assert await realtime(client, site) == {"activeVisitors": 0, "pageviewsPerMinute": 0, "eventsPerMinute": 0,
                                            "topActivePages": [], "recentEvents": []}
    live = await realtime(client, site, window=120)
    assert live["activeVisitors"] == 2 and live["eventsPerMinute"] == 2 and live["pageviewsPerMinute"] == 1.5


async def test_recent_events_are_the_20_newest(rt):
    client, clock, site = rt
    for i in range(25):
        await post_event(client, {"s": site, "n": f"e{i}", "sid": "v"})
        clock.advance(timedelta(milliseconds=100))
    live = await realtime(client, site)
    assert [e["name"] for e in live["recentEvents"]] == [f"e{i}" for i in range(24, 4, -1)]
    assert live["eventsPerMinute"] == 25 and live["activeVisitors"] == 1


async def test_dropped_and_failed_events_are_not_live(rt, monkeypatch):
    client, _, site = rt
    from storage import events as event_store

    async def broken(conn, records):
        raise asyncpg.PostgresError("disk full")

    monkeypatch.setattr(event_store, "copy_events", broken)
    assert (await post_event(client, {"s": site, "n": "pageview", "sid": "v"})).status == 500
    bot = {"User-Agent": "Googlebot/2.1 (+http://www.google.com/bot.html)"}
    assert (await post_event(client, {"s": site, "n": "pageview"}, bot)).status == 202
    live = await realtime(client, site)
    assert live["eventsPerMinute"] == 0 and live["recentEvents"] == []


async def test_session_required_and_parameters(client, login, database_url, workspace):
    resp = await client.get("/api/analytics/realtime?siteId=x")
    assert resp.status == 401 and await resp.json() == {"error": "unauthorized"}
    await login()
    resp = await client.get("/api/analytics/realtime")
    assert resp.status == 400 and await resp.json() == {"error": "missing siteId"}
    site, _ = await register_site(database_url, workspace)
    for window in ("0", "3601", "abc", "-5"):
        resp = await client.get(f"/api/analytics/realtime?siteId={site}&window={window}")
        assert resp.status == 400 and (await resp.json())["error"] == "invalid window"
    assert (await client.get(f"/api/analytics/realtime?siteId={site}&window=3600")).status == 200
    # Spaces around the id, as the other reads take it (a pasted id).
    assert (await client.get(f"/api/analytics/realtime?siteId=%20{site}%20")).status == 200
    resp = await client.get("/api/analytics/realtime?siteId=%20")
    assert resp.status == 400 and await resp.json() == {"error": "missing siteId"}


async def test_other_workspace_site_is_404(client, login, database_url, workspace):
    await login()
    foreign, _ = await register_site(database_url, f"other-{workspace}")
    for site in (foreign, "no-such-site"):
        resp = await client.get(f"/api/analytics/realtime?siteId={site}")
        assert resp.status == 404 and await resp.json() == {"error": "not found"}


async def test_processes_share_the_window_through_redis(make_client, settings, redis_url, login, workspace,
                                                        database_url):
    shared = dataclasses.replace(settings, redis_url=redis_url)
    first, second = await make_client(shared), await make_client(shared)
    clock = FakeClock()
    first.app[SITE_RUNTIME].clock = second.app[SITE_RUNTIME].clock = clock
    await login(the_client=second)
    site, _ = await register_site(database_url, workspace, verified=False)
    await post_event(first, {"s": site, "n": "pageview", "p": "/x", "sid": "a"})
    await post_event(second, {"s": site, "n": "pageview", "p": "/x", "sid": "b"})
    live = await realtime(second, site)
    assert live["activeVisitors"] == 2 and live["topActivePages"] == [{"key": "/x", "count": 2}]


async def test_redis_window_reads_the_same_as_the_memory_window_for_one_batch(redis_url):
    redis = Redis.from_url(redis_url)
    site, t = f"site_{secrets.token_hex(4)}", 1_700_000_000_000
    batch = [LiveEvent(f"evt_{i}", "pageview" if i % 3 else "signup", f"/p{i % 4}" if i % 5 else None, "DE",
                       f"ses_{i % 7}", t + i * 150) for i in range(40)]
    try:
        memory, shared = MemoryRealtime(), RedisRealtime(redis, Outages())
        await memory.record(site, batch)
        await shared.record(site, batch)
        for window in (3, 60):
            expected = await memory.snapshot(site, t + 6000, window)
            assert await shared.snapshot(site, t + 6000, window) == expected
        assert expected.active_visitors == 7 and len(expected.recent) == 20
    finally:
        await redis.aclose()


async def test_active_pages_are_keyed_like_every_page_list(rt):
    """Query string and fragment are cut as in top-pages (`/pricing?plan=a` counts as `/pricing`); a path
    that is nothing else has no page and is left out; recent events keep the stored path."""
    client, _, site = rt
    for sid, path in (("v1", "/pricing"), ("v2", "/pricing?plan=a"), ("v3", "/h#sec"), ("v4", "/h"),
                      ("v5", "?only=query")):
        await post_event(client, {"s": site, "n": "pageview", "p": path, "sid": sid})
    live = await realtime(client, site)
    assert live["topActivePages"] == [{"key": "/h", "count": 2}, {"key": "/pricing", "count": 2}]
    assert [e["path"] for e in live["recentEvents"]] == ["?only=query", "/h", "/h#sec", "/pricing?plan=a",
                                                         "/pricing"]


async def test_redis_merges_buckets_an_older_process_wrote_by_full_path(redis_url):
    """During a rolling deploy a process from before counts `p:<full path>` fields; they join their page."""
    redis = Redis.from_url(redis_url)
    site, t = f"site_{secrets.token_hex(4)}", 1_700_000_000_000
    try:
        shared = RedisRealtime(redis, Outages())
        await shared.record(site, [LiveEvent("evt_1", "pageview", "/a", None, "ses_1", t)])
        await redis.hincrby(f"tally:rt:{site}:b:{t // 1000}", "p:/a?x=1", 2)
        snap = await shared.snapshot(site, t + 1000, 60)
        assert snap.top_pages == [("/a", 3)]
    finally:
        await redis.aclose()


async def test_an_event_at_the_window_edge_is_counted_listed_and_active_alike(rt):
    """The window is whole seconds: the counts come from per-second buckets, and the active visitors and
    recent events must cover the same seconds. An event half a second into the second the window just
    left was still an active visitor and a recent event, while the per-minute counts had dropped it."""
    client, clock, site = rt
    clock.advance(timedelta(milliseconds=500))
    await post_event(client, {"s": site, "n": "pageview", "p": "/edge", "sid": "v1"})
    clock.advance(timedelta(seconds=59))  # 59 s later, mid-second: inside a 60 s window
    live = await realtime(client, site, window=60)
    assert (live["activeVisitors"], live["pageviewsPerMinute"], len(live["recentEvents"])) == (1, 1, 1)
    clock.advance(timedelta(milliseconds=500))  # the event's second has left the window
    assert await realtime(client, site, window=60) == {
        "activeVisitors": 0, "pageviewsPerMinute": 0, "eventsPerMinute": 0, "topActivePages": [],
        "recentEvents": []}
