"""Server-side session assignment, in memory and with Redis, and the visits the dashboard reads from it."""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from actors.sessions import MemorySessions, VisitIn, make_sessions
from app.appkeys import MIRROR, SITE_RUNTIME
from common.outages import Outages
from storage.ids import new_id
from tests.analytics_support import create_site, insert_events
from tests.conftest import connect
from tests.site_helpers import FakeClock, breakdown_rows, ms, post_event, stored_events, visits

UA_A = ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.0 Safari/605.1.15")
UA_B = "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"


@pytest.fixture(params=["memory", "redis"])
async def session_client(request, make_client, settings, redis_url):
    extra = {"redis_url": redis_url} if request.param == "redis" else {}
    client = await make_client(dataclasses.replace(settings, trusted_proxies=("127.0.0.1/32",), **extra))
    clock = FakeClock()
    client.app[SITE_RUNTIME].clock = clock
    return client, clock


def visitor(ip: str, ua: str = UA_A) -> dict[str, str]:
    return {"X-Forwarded-For": ip, "User-Agent": ua}


async def test_same_visitor_keeps_a_session_until_30_idle_minutes(session_client, database_url):
    client, clock = session_client
    site = f"dev-{secrets.token_hex(6)}"
    me = visitor("203.0.113.10")
    await post_event(client, {"s": site, "n": "pageview", "p": "/", "r": "https://news.example/"}, me)
    clock.advance(timedelta(minutes=29))
    await post_event(client, {"s": site, "n": "pageview", "p": "/pricing"}, me)
    await post_event(client, {"s": site, "n": "signup", "p": "/pricing"}, me)
    clock.advance(timedelta(minutes=30))  # exactly 30 idle minutes: still the same visit
    await post_event(client, {"s": site, "n": "pageview", "p": "/docs"}, me)
    clock.advance(timedelta(minutes=30, seconds=1))  # longer: a new visit
    await post_event(client, {"s": site, "n": "pageview", "p": "/again"}, me)

    rows = await stored_events(database_url, site)
    sids = [r["session_id"] for r in rows]
    assert sids[0] == sids[1] == sids[2] == sids[3] != sids[4]
    assert all(s.startswith("ses_") for s in sids)

    first = (1, 3, 4, ms(rows[3]["ts"] - rows[0]["ts"]))
    assert await visits(client.app, site, rows, "entry_page") == {"/": first, "/again": (1, 1, 1, 0)}
    assert await visits(client.app, site, rows, "exit_page") == {"/docs": first, "/again": (1, 1, 1, 0)}


async def test_different_visitors_get_different_sessions(session_client, database_url):
    client, _ = session_client
    site = f"dev-{secrets.token_hex(6)}"
    for who in (visitor("203.0.113.10"), visitor("203.0.113.11"), visitor("203.0.113.10", UA_B),
                visitor("203.0.113.10")):
        await post_event(client, {"s": site, "n": "pageview", "p": "/"}, who)
    rows = await stored_events(database_url, site)
    sids = [r["session_id"] for r in rows]
    assert len(set(sids[:3])) == 3 and sids[3] == sids[0]
    assert await visits(client.app, site, rows, "entry_page") == {"/": (3, 4, 4, 0)}


async def test_client_session_id_is_used_and_upserted(session_client, database_url):
    client, clock = session_client
    site = f"dev-{secrets.token_hex(6)}"
    await post_event(client, {"s": site, "n": "pageview", "p": "/a", "sid": "tab-1"}, {"CF-IPCountry": "SE"})
    clock.advance(timedelta(hours=2))
    await post_event(client, {"s": site, "n": "outbound", "p": "/a", "sid": "tab-1"})
    await post_event(client, {"s": site, "n": "pageview", "p": "/b", "sid": "tab-1"})
    rows = await stored_events(database_url, site)
    assert [r["session_id"] for r in rows] == ["tab-1"] * 3 and rows[0]["country"] == "SE"
    assert await visits(client.app, site, rows, "entry_page") == {"/a": (1, 2, 3, ms(timedelta(hours=2)))}
    assert await visits(client.app, site, rows, "exit_page") == {"/b": (1, 2, 3, ms(timedelta(hours=2)))}


async def test_visitor_key_is_not_the_ip(session_client, database_url):
    client, _ = session_client
    site = f"dev-{secrets.token_hex(6)}"
    await post_event(client, {"s": site, "n": "pageview"}, visitor("203.0.113.77"))
    [row] = await stored_events(database_url, site)
    assert "203.0.113.77" not in str(row.values())
    sessions = client.app[SITE_RUNTIME].sessions
    if isinstance(sessions, MemorySessions):
        keys = [key for pair in sessions._by_visitor for key in pair]
    else:
        keys = [k.decode() async for k in sessions._redis.scan_iter(match=f"tally:visitor:{site}:*")]
    assert len(keys) >= 1 and all("203.0.113.77" not in key for key in keys)


async def test_memory_keeps_at_most_its_capacity_and_forgets_the_least_recently_seen():
    """A flood of visitors and page-load ids cannot grow the process: past the capacity the entry seen
    longest ago is forgotten, and only that visitor starts a new visit."""
    sessions = MemorySessions(capacity=3)
    first = await sessions.assign("s", [VisitIn(f"visitor-{i}", 1_000 + i, f"page-{i}", "join") for i in range(3)])
    await sessions.assign("s", [VisitIn("visitor-0", 2_000, "page-0b", "join")])  # visitor-0 seen again
    await sessions.assign("s", [VisitIn("visitor-3", 3_000, "page-3", "join")])  # full: visitor-1 goes
    assert len(sessions._by_visitor) == 3 and len(sessions._by_sid) == 3
    again = await sessions.assign("s", [VisitIn("visitor-0", 4_000, "page-0c", "join"),
                                        VisitIn("visitor-1", 4_000, "page-1b", "join")])
    assert again[0].session_id == first[0].session_id  # kept: continues its visit
    assert again[1].session_id == "page-1b" != first[1].session_id  # forgotten: a new visit


async def test_new_utc_day_starts_a_new_visit(session_client, database_url):
    """The visitor-key salt rotates at UTC midnight, so yesterday's key cannot be linked to today's."""
    from datetime import UTC, datetime

    client, clock = session_client
    clock.now = datetime.now(UTC).replace(hour=23, minute=59, second=0, microsecond=0)
    site = f"dev-{secrets.token_hex(6)}"
    await post_event(client, {"s": site, "n": "pageview"}, visitor("203.0.113.10"))
    clock.advance(timedelta(minutes=2))
    await post_event(client, {"s": site, "n": "pageview"}, visitor("203.0.113.10"))
    sids = [r["session_id"] for r in await stored_events(database_url, site)]
    assert sids[0] != sids[1]


async def test_processes_share_sessions_through_redis(make_client, settings, redis_url, database_url):
    """Two apps (as two processes) on one Redis continue the same visit."""
    shared = dataclasses.replace(settings, trusted_proxies=("127.0.0.1/32",), redis_url=redis_url)
    first, second = await make_client(shared), await make_client(shared)
    clock = FakeClock()
    first.app[SITE_RUNTIME].clock = second.app[SITE_RUNTIME].clock = clock
    site = f"dev-{secrets.token_hex(6)}"
    await post_event(first, {"s": site, "n": "pageview", "p": "/"}, visitor("203.0.113.20"))
    clock.advance(timedelta(minutes=5))
    await post_event(second, {"s": site, "n": "pageview", "p": "/next"}, visitor("203.0.113.20"))
    rows = await stored_events(database_url, site)
    assert rows[0]["session_id"] == rows[1]["session_id"]
    visit = (1, 2, 2, ms(timedelta(minutes=5)))
    assert await visits(second.app, site, rows, "entry_page") == {"/": visit}
    assert await visits(second.app, site, rows, "exit_page") == {"/next": visit}


async def test_batches_mirrored_out_of_order_make_the_same_visit(client, database_url, workspace):
    """The store merges what each batch adds, whatever order the batches reach it in."""
    conn = await connect(database_url)
    try:
        site_id, _, workspace_id = await create_site(conn, workspace)
        sid, t0 = f"s-{site_id}", datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        early = [(new_id("evt"), "pageview", "/landing", "https://news.example/", "DE", "v", sid, t0, None),
                 (new_id("evt"), "signup", "/landing", "", None, "v", sid, t0 + timedelta(minutes=1), None)]
        late = [(new_id("evt"), "pageview", "/pricing", "https://other.example/", "US", "v", sid,
                 t0 + timedelta(minutes=5), None)]
        await insert_events(conn, site_id, workspace_id, late)
        await client.app[MIRROR].catch_up()
        await insert_events(conn, site_id, workspace_id, early)
    finally:
        await conn.close()
    rows = await stored_events(database_url, site_id)
    visit = (1, 2, 3, ms(timedelta(minutes=5)))
    assert await visits(client.app, site_id, rows, "entry_page") == {"/landing": visit}
    assert await visits(client.app, site_id, rows, "exit_page") == {"/pricing": visit}


@pytest.fixture(params=["memory", "redis"])
async def sessions(request, redis_url):
    redis = Redis.from_url(redis_url) if request.param == "redis" else None
    yield make_sessions(redis, Outages())
    if redis is not None:
        await redis.aclose()


T0, IDLE = 1_700_000_000_000, 30 * 60 * 1000
GOOGLE = (None, None, None, None, None, "Google", "Organic Search")
NEWS = (None, None, None, None, None, "news.example", "Referral")
DIRECT = (None,) * 7


def _site() -> str:
    return f"site_{secrets.token_hex(4)}"


async def test_one_batch_with_repeat_visits_assigns_as_visit_by_visit(sessions):
    site = _site()
    visits_in = [VisitIn("a", T0), VisitIn("a", T0 + 1000), VisitIn("b", T0 + 2000), VisitIn("a", T0 + 1000 + IDLE + 1)]
    ids = [v.session_id for v in await sessions.assign(site, visits_in)]
    assert ids[0] == ids[1] and len({ids[0], ids[2], ids[3]}) == 3
    # The next batch continues the session the last one left open.
    again = await sessions.assign(site, [VisitIn("a", T0 + 1000 + IDLE + 2), VisitIn("b", T0 + 3000)])
    assert [v.session_id for v in again] == [ids[3], ids[2]]


async def test_page_loads_of_one_visitor_are_one_visit_with_its_first_acquisition(sessions):
    """A multi-page site: each page load's tracker makes a new sid, marked "join"."""
    site = _site()
    assigned = await sessions.assign(site, [VisitIn("a", T0, "page-1", "join", GOOGLE),
                                            VisitIn("a", T0 + 60_000, "page-2", "join", DIRECT),
                                            VisitIn("b", T0 + 60_000, "page-3", "join", NEWS)])
    assert assigned == [("page-1", GOOGLE), ("page-1", GOOGLE), ("page-3", NEWS)]
    # A later batch: another page load, and a server-side sender reusing the second page's id.
    later = await sessions.assign(site, [VisitIn("a", T0 + 120_000, "page-4", "join", NEWS),
                                         VisitIn("server", T0 + 130_000, "page-2", "exact", DIRECT)])
    assert later == [("page-1", GOOGLE), ("page-1", GOOGLE)]
    # 30 idle minutes end the visit: a new page load starts one under its own id and acquisition.
    [fresh] = await sessions.assign(site, [VisitIn("a", T0 + 130_000 + IDLE + 1, "page-5", "join", DIRECT)])
    assert fresh == ("page-5", DIRECT)


async def test_exact_sids_never_join_and_leave_the_visitors_visit_alone(sessions):
    """Server-side senders: several users' ids from one address stay apart, as before "join" existed."""
    site = _site()
    assigned = await sessions.assign(site, [VisitIn("backend", T0, "user-1", "exact", GOOGLE),
                                            VisitIn("backend", T0 + 1, "user-2", "exact", NEWS),
                                            VisitIn("backend", T0 + 2, None, None, DIRECT),
                                            VisitIn("backend", T0 + 3, "user-1", "exact", DIRECT)])
    assert [a.session_id for a in assigned[:2]] == ["user-1", "user-2"]
    assert assigned[2].session_id.startswith("ses_")
    assert assigned[3] == ("user-1", GOOGLE)


async def test_a_reset_starts_a_visit_that_the_next_page_load_continues(sessions):
    site = _site()
    assigned = await sessions.assign(site, [VisitIn("a", T0, "page-1", "join", GOOGLE),
                                            VisitIn("a", T0 + 1, "after-reset", "new", DIRECT),
                                            VisitIn("a", T0 + 2, "page-2", "join", NEWS),
                                            VisitIn("a", T0 + 3, "page-1", "join", DIRECT)])
    assert assigned == [("page-1", GOOGLE), ("after-reset", DIRECT), ("after-reset", DIRECT),
                        ("page-1", GOOGLE)]


async def test_a_multi_page_visit_through_the_tracker_is_one_visit_from_where_it_came(session_client,
                                                                                     database_url):
    """Each page load of a tracker makes a new sid; one person clicking from Google's result to a second
    page is still one visit, one bounce-free Organic Search visit, not an Organic Search bounce plus a
    Direct one."""
    client, clock = session_client
    site = f"dev-{secrets.token_hex(6)}"
    home, pricing = "https://shop.example/", "https://shop.example/pricing"
    await post_event(client, {"s": site, "n": "pageview", "u": home, "p": "/", "r": "https://www.google.com/",
                              "sid": "load-1", "visit": "join"}, visitor("203.0.113.30"))
    clock.advance(timedelta(seconds=40))
    await post_event(client, {"s": site, "n": "pageview", "u": pricing, "p": "/pricing", "r": home,
                              "sid": "load-2", "visit": "join"}, visitor("203.0.113.30"))
    # Someone else's page load from the same network but another browser is their own visit.
    await post_event(client, {"s": site, "n": "pageview", "u": pricing, "p": "/pricing", "r": home,
                              "sid": "load-3", "visit": "join"}, visitor("203.0.113.30", UA_B))
    rows = await stored_events(database_url, site)
    assert [(r["session_id"], r["source"], r["channel"]) for r in rows] == [
        ("load-1", "Google", "Organic Search"), ("load-1", "Google", "Organic Search"), ("load-3", None, "Direct")]
    assert [r["referrer"] for r in rows] == ["https://www.google.com/", home, home]  # as sent
    assert await visits(client.app, site, rows, "entry_page") == {
        "/": (1, 2, 2, ms(timedelta(seconds=40))), "/pricing": (1, 1, 1, 0)}
    channels = await breakdown_rows(client.app, site, rows, "channel")
    assert {r["key"]: (r["visitors"], r["visits"], r["pageviews"], r["bounce_rate"]) for r in channels} == {
        "Organic Search": (1, 1, 2, 0), "Direct": (1, 1, 1, 100)}
