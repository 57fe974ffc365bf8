"""Engagement events (Plausible's tracker sends one when a page is hidden or left, or before its next SPA
pageview): stored with their scroll depth and engaged time, counted in no event, pageview or visit number,
and read back as the pages' scroll depth and time on page."""

from __future__ import annotations

import secrets

import pytest

from app.appkeys import ANALYTICS, MIRROR
from storage import analytics_mirror
from storage.clickhouse import AnalyticsStore
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import ENGAGEMENT, SITE_FROM_INPUT
from tests.analytics_support import store_of_its_own
from tests.conftest import TEST_CLUSTER, connect
from tests.site_helpers import post_event, register_site, stored_events
from tests.test_plausible_events import send
from tests.test_site_dimensions import UA

SAFARI = {"User-Agent": UA["safari_mac"]}


def page(domain: str, path: str, **fields) -> dict:
    return {"n": "pageview", "u": f"https://{domain}{path}", "d": domain, **fields}


def engagement(domain: str, path: str, sd: int, e: int, **fields) -> dict:
    """As @plausible-analytics/tracker sends it (its `v` and the pageview's props `p` too)."""
    return {"n": "engagement", "u": f"https://{domain}{path}", "d": domain, "sd": sd, "e": e, "v": 36, **fields}


async def read(client, route: str, **params) -> dict:
    await client.app[MIRROR].catch_up()
    resp = await client.get(f"/api/analytics/{route}", params=params)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def counted(client, site: str) -> dict:
    """What the dashboard counts of the site: totals, per-page and per-visit numbers, the live view."""
    q = {"siteId": site, "range": "24h"}
    overview = await read(client, "overview", **q)
    pages = await read(client, "breakdown", **q, property="page",
                       metrics="visitors,visits,pageviews,events,bounce_rate,visit_duration")
    entries = await read(client, "breakdown", **q, property="entry_page", metrics="visits,pageviews,visit_duration")
    live = await read(client, "realtime", siteId=site)
    return {"overview": {k: overview[k] for k in ("totalEvents", "totalPageviews", "uniqueVisitors", "bounceRate",
                                                   "avgSessionDuration")},
            "pages": pages["data"], "entries": entries["data"],
            "live": (live["eventsPerMinute"], live["pageviewsPerMinute"], [e["name"] for e in live["recentEvents"]])}


async def test_engagement_gives_pages_scroll_depth_and_time_on_page_and_counts_nowhere_else(
        client, database_url, workspace, login):
    await login()
    site, domain = await register_site(database_url, workspace)
    for body, headers in ((page(domain, "/blog/a", p={"author": "ann"}), {}), (page(domain, "/pricing"), {}),
                          (page(domain, "/blog/a"), SAFARI), (page(domain, "/about"), SAFARI)):
        assert (await send(client, body, headers)).status == 202
    before = await counted(client, site)
    # Chrome's visit: two reports on /blog/a (scrolled further, read longer), one on /pricing; Safari's: one on
    # /blog/a. /about had none.
    for body, headers in ((engagement(domain, "/blog/a", 40, 10_000, p={"author": "ann"}), {}),
                          (engagement(domain, "/blog/a", 80, 5_000, p={"author": "ann"}), {}),
                          (engagement(domain, "/pricing", 130, 3_000), {}),
                          (engagement(domain, "/blog/a", 20, 31_000), SAFARI)):
        resp = await send(client, body, headers)
        assert resp.status == 202 and await resp.text() == "ok"
    assert await counted(client, site) == before

    rows = await stored_events(database_url, site)
    sessions = {(r["name"], r["path"], r["browser"]): r["session_id"] for r in rows}
    assert [(r["name"], r["path"], r["properties"]) for r in rows if r["name"] == "engagement"] == [
        ("engagement", "/blog/a", {"author": "ann", "$scroll_depth": 40, "$engagement_time": 10_000}),
        ("engagement", "/blog/a", {"author": "ann", "$scroll_depth": 80, "$engagement_time": 5_000}),
        ("engagement", "/pricing", {"$scroll_depth": 100, "$engagement_time": 3_000}),  # past 100: 100
        ("engagement", "/blog/a", {"$scroll_depth": 20, "$engagement_time": 31_000})]
    # Each joined its visitor's visit.
    assert sessions[("engagement", "/pricing", "Chrome")] == sessions[("pageview", "/pricing", "Chrome")]
    assert sessions[("engagement", "/blog/a", "Safari")] == sessions[("pageview", "/about", "Safari")]

    q = {"siteId": site, "range": "24h", "property": "page"}
    body = await read(client, "breakdown", **q, metrics="visitors,scroll_depth,time_on_page")
    assert body["metrics"] == ["visitors", "scroll_depth", "time_on_page"]
    # /blog/a: the visits' deepest scrolls 80 and 20, their times 15 s and 31 s. (One address: one visitor.)
    assert body["data"] == [
        {"key": "/about", "visitors": 1, "scroll_depth": None, "time_on_page": None},
        {"key": "/blog/a", "visitors": 1, "scroll_depth": 50, "time_on_page": 23},
        {"key": "/pricing", "visitors": 1, "scroll_depth": 100, "time_on_page": 3}]
    # Filters choose the engagement events as they choose the pageviews.
    safari = await read(client, "breakdown", **q, metrics="scroll_depth,time_on_page", filter="browser==Safari")
    assert safari["data"] == [{"key": "/about", "scroll_depth": None, "time_on_page": None},
                              {"key": "/blog/a", "scroll_depth": 20, "time_on_page": 31}]
    by_author = await read(client, "breakdown", **q, metrics="scroll_depth", filter="props:author==ann")
    assert by_author["data"] == [{"key": "/blog/a", "scroll_depth": 80}]  # the one visit's deepest
    # An event or goal filter chooses events, which engagement events are not: no numbers rather than wrong ones.
    events = await read(client, "breakdown", **q, metrics="visitors,scroll_depth", filter="event==pageview")
    assert [r["scroll_depth"] for r in events["data"]] == [None, None, None]

    # The analytics store holds them apart from the site's events.
    store = client.app[ANALYTICS]
    assert await store.query(f"SELECT name, count() FROM {store.table('site_engagement')} FINAL "
                             "WHERE site_id = {s:String} GROUP BY name", {"s": site}) == [("engagement", 4)]
    assert await store.query(f"SELECT count() FROM {store.table('site_events')} FINAL WHERE site_id = {{s:String}} "
                             "AND name = 'engagement'", {"s": site}) == [(0,)]


async def test_engagement_metrics_are_for_pages_only(client, database_url, workspace, login):
    await login()
    site, _ = await register_site(database_url, workspace)
    q = {"siteId": site, "range": "24h"}
    resp = await client.get("/api/analytics/breakdown", params={**q, "property": "source", "metrics": "scroll_depth"})
    assert resp.status == 400
    assert await resp.json() == {"error": "scroll_depth needs property=page"}
    resp = await client.get("/api/analytics/breakdown", params={**q, "property": "page", "metrics": "depth"})
    assert resp.status == 400
    assert (await resp.json())["allowed"][-2:] == ["scroll_depth", "time_on_page"]


@pytest.mark.parametrize(("fields", "issues"), [
    ({"sd": 50}, [{"field": "e", "message": "required for an engagement event"}]),
    ({"e": 1000}, [{"field": "sd", "message": "required for an engagement event"}]),
    ({"sd": -1, "e": 1000}, [{"field": "sd", "message": "Expected a whole number >= 0"}]),
    ({"sd": "50", "e": 1000}, [{"field": "sd", "message": "Expected a whole number >= 0"}]),
    ({"sd": 50, "e": 1.5}, [{"field": "e", "message": "Expected a whole number >= 0 and <= 86400000"}]),
    ({"sd": 50, "e": 86_400_001}, [{"field": "e", "message": "Expected a whole number >= 0 and <= 86400000"}]),
    ({"sd": True, "e": 1000}, [{"field": "sd", "message": "Expected a whole number >= 0"}]),
])
async def test_malformed_engagement_is_400_and_stores_nothing(client, database_url, workspace, fields, issues):
    site, domain = await register_site(database_url, workspace)
    resp = await send(client, {"n": "engagement", "u": f"https://{domain}/", "d": domain, **fields})
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload", "issues": issues}
    assert await stored_events(database_url, site) == []


async def test_tallys_own_endpoint_takes_engagement_events_too(client, database_url, workspace):
    """`engagement` is a built-in name on /api/service/event as well: with its two numbers, or a 400."""
    site, domain = await register_site(database_url, workspace)
    base = {"s": site, "n": "engagement", "u": f"https://{domain}/docs", "sid": "tab-1"}
    resp = await post_event(client, {**base, "sd": 75, "e": 4200})
    assert resp.status == 202
    resp = await post_event(client, base)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload", "issues": [
        {"field": "sd", "message": "required for an engagement event"},
        {"field": "e", "message": "required for an engagement event"}]}
    resp = await post_event(client, {**base, "sd": 75, "e": -5})
    assert resp.status == 400 and (await resp.json())["issues"][0]["field"] == "e"
    rows = await stored_events(database_url, site)
    assert [(r["name"], r["path"], r["properties"]) for r in rows] == [
        ("engagement", "/docs", {"$scroll_depth": 75, "$engagement_time": 4200})]
    # Other events ignore the two fields.
    assert (await post_event(client, {**base, "n": "pageview", "sd": 10, "e": 5})).status == 202
    assert (await stored_events(database_url, site))[-1]["properties"] is None
    # The document says what the server requires.
    schema = (await (await client.get("/openapi.json")).json())["components"]["schemas"]["SiteEventIn"]
    assert (schema["if"], schema["then"]) == ({"required": ["n"], "properties": {"n": {"const": "engagement"}}},
                                              {"required": ["sd", "e"]})



# --- a store from before engagement events had their table --------------------------------------------------

@pytest.fixture(params=["plain", "cluster"])
def own_store(request, analytics_store: AnalyticsStore) -> AnalyticsStore:
    return store_of_its_own(analytics_store, "eng", TEST_CLUSTER if request.param == "cluster" else None)


async def insert_input(store: AnalyticsStore, site: str, rows: list[tuple[str, str, str]]) -> None:
    """(id, name, properties) of one page's events, as the mirror inserts them."""
    values = ", ".join(f"('{i}', '{site}', '{name}', now64(6), '/doc', 'ses_1', '{props}')" for i, name, props in rows)
    await store.command(f"INSERT INTO {store.database}.events_in (id, site_id, name, ts, path, session_id, properties) "
                        f"VALUES {values}")


async def held(store: AnalyticsStore, table: str, site: str, columns: str = "id") -> list[tuple]:
    # The local table: both test shards are this process, so a Distributed read would list each row twice.
    return store.client.query(f"SELECT {columns} FROM {store.local_table(table)} WHERE site_id = {{s:String}} "
                              "ORDER BY id", parameters={"s": site}).result_rows


async def as_from_before(db: AnalyticsStore) -> None:
    """The store as an earlier release left it: one input view for every site event, no engagement table."""
    await db.command(f"DROP VIEW {db.database}.site_engagement_in_mv{db.on_cluster}")
    for table in dict.fromkeys((db.table("site_engagement"), db.local_table("site_engagement"))):
        await db.command(f"DROP TABLE {table}{db.on_cluster}")
    view = f"{db.database}.site_events_in_mv"
    await db.command(f"ALTER TABLE {view}{db.on_cluster} MODIFY QUERY " + SITE_FROM_INPUT.removesuffix(
        f" AND name != '{ENGAGEMENT}'").format(source=f"{db.database}.events_in"))


async def test_a_store_from_before_routes_engagement_events_to_their_own_table(own_store):
    """A store opened by an earlier release has one input view for every site event and no engagement table:
    opened again, it gains the table and routes engagement events there, their numbers taken from the props."""
    db, site = own_store, f"site_{secrets.token_hex(4)}"
    await as_from_before(db)
    numbers = '{"$scroll_depth": 140, "$engagement_time": 2500}'
    await insert_input(db, site, [("evt_1", "engagement", numbers)])
    assert await held(db, "site_events", site) == [("evt_1",)]  # as the earlier release stored it
    ensure_schema(db)
    await insert_input(db, site, [("evt_2", "engagement", numbers), ("evt_3", "pageview", "{}")])
    assert await held(db, "site_events", site) == [("evt_1",), ("evt_3",)]
    assert await held(db, "site_engagement", site, "id, page, scroll_depth, engaged_ms") == [
        ("evt_2", "/doc", 100, 2500)]
    ensure_schema(db)  # opened again: nothing to do
    await insert_input(db, site, [("evt_4", "engagement", numbers)])
    assert [i for (i,) in await held(db, "site_engagement", site)] == ["evt_2", "evt_4"]


async def test_a_rebuild_moves_the_engagement_events_a_store_from_before_kept_as_site_events(
        client, database_url, workspace, own_store):
    db = own_store
    site, domain = await register_site(database_url, workspace)
    for body in (page(domain, "/doc"), engagement(domain, "/doc", 60, 7000)):
        assert (await send(client, body)).status == 202
    rows = await stored_events(database_url, site)
    pageview, engaged = (next(r["id"] for r in rows if r["name"] == name) for name in ("pageview", "engagement"))
    await as_from_before(db)
    conn = await connect(database_url)
    try:
        await analytics_mirror.write_events(db, await analytics_mirror.site_events_csv(conn, site))
        assert [i for (i,) in await held(db, "site_events", site)] == sorted([pageview, engaged])
        ensure_schema(db)  # the new release opens it: what it held stays where it was
        assert [i for (i,) in await held(db, "site_events", site)] == sorted([pageview, engaged])
        await analytics_mirror.rebuild(conn, db, since=rows[0]["ts"])
    finally:
        await conn.close()
    assert await held(db, "site_events", site) == [(pageview,)]
    assert await held(db, "site_engagement", site, "id, scroll_depth, engaged_ms") == [(engaged, 60, 7000)]
