"""Issue 12 reads on the analytics engine: GET /api/analytics/breakdown, `filter=` terms on every
endpoint, goals in filters and breakdowns, and `compare=`. Numbers worked out by hand from
tests/analytics_support.py (within 24h: events 1, 2, 3, 4, 8, 9 of sessions s1, s2, s5)."""

from __future__ import annotations

import re

import asyncpg
import pytest

from storage import events as events_store
from storage.events import EventRow
from storage.ids import new_id
from tests.analytics_support import D, M, add_signup_goal, load_fixture


@pytest.fixture
async def site(client, database_url, workspace, login):
    await login()
    return await load_fixture(database_url, workspace)


async def get(client, route: str, params: list[tuple[str, str]]):
    resp = await client.get(f"/api/analytics/{route}", params=params)
    return resp.status, await resp.json()


ALL = "visitors,visits,pageviews,events,bounce_rate,visit_duration"


async def test_breakdown_by_page_with_every_visit_metric(client, site):
    status, body = await get(client, "breakdown", [("siteId", site.site_id), ("range", "24h"),
                                                   ("property", "page"), ("metrics", ALL)])
    assert status == 200, body
    assert body["data"] == [
        {"key": "/", "visitors": 2, "visits": 2, "pageviews": 2, "events": 2, "bounce_rate": 50.0,
         "visit_duration": 75_000},
        {"key": "/live", "visitors": 1, "visits": 1, "pageviews": 1, "events": 1, "bounce_rate": 100.0,
         "visit_duration": 0},
        {"key": "/pricing", "visitors": 1, "visits": 1, "pageviews": 1, "events": 1, "bounce_rate": 0.0,
         "visit_duration": 120_000},
    ]  # pageviews only: the outbound click on / and the signup on /pricing are not counted
    status, body = await get(client, "breakdown", [("siteId", site.site_id), ("range", "24h"),
                                                   ("property", "page"), ("limit", "1"), ("offset", "1")])
    assert body["data"] == [{"key": "/live", "visitors": 1}]


async def test_breakdown_by_page_counts_pageviews_like_top_pages(client, site, database_url):
    """The dashboard's Top pages (property=page) lists what /top-pages lists: pages with a pageview. A page
    that only had custom events is no row, unless a filter chooses those events."""
    conn = await asyncpg.connect(database_url)
    try:
        now = site.now
        await events_store.copy_events(conn, [EventRow(
            new_id("evt"), site.workspace_id, "live", "video_play", now, now, site_id=site.site_id,
            session_id="s9", path="/only-custom?t=1", ip_hash="v9")])
    finally:
        await conn.close()
    base = [("siteId", site.site_id), ("range", "24h")]
    _, top = await get(client, "top-pages", base)
    _, pages = await get(client, "breakdown", [*base, ("property", "page"), ("metrics", "visitors,pageviews")])
    assert [r["key"] for r in pages["data"]] == [r["key"] for r in top["data"]] == ["/", "/live", "/pricing"]
    _, chosen = await get(client, "breakdown", [*base, ("property", "page"), ("filter", "event==video_play"),
                                                ("metrics", "visitors,events")])
    assert chosen["data"] == [{"key": "/only-custom", "visitors": 1, "events": 1}]
    # Excluding an event chooses none: the pageviews still count.
    _, others = await get(client, "breakdown", [*base, ("property", "page"), ("filter", "event!=signup")])
    assert [r["key"] for r in others["data"]] == ["/", "/live", "/pricing"]


async def test_breakdown_by_entry_and_exit_page(client, site):
    base = [("siteId", site.site_id), ("range", "24h")]
    _, entry = await get(client, "breakdown", [*base, ("property", "entry_page"), ("metrics", ALL)])
    assert entry["data"] == [
        {"key": "/", "visitors": 2, "visits": 2, "pageviews": 3, "events": 5, "bounce_rate": 50.0,
         "visit_duration": 75_000},
        {"key": "/live", "visitors": 1, "visits": 1, "pageviews": 1, "events": 1, "bounce_rate": 100.0,
         "visit_duration": 0},
    ]
    _, exits = await get(client, "breakdown", [*base, ("property", "exit_page"), ("metrics", "visits")])
    assert exits["data"] == [{"key": "/", "visits": 1}, {"key": "/live", "visits": 1}, {"key": "/pricing", "visits": 1}]


@pytest.mark.parametrize(("terms", "events", "pageviews", "visitors"), [
    (["page==/pri*"], 2, 1, 1),             # one segment wildcard: /pricing (query string dropped)
    (["page==/**"], 6, 4, 3),
    (["country!=US"], 1, 1, 1),
    (["country!=us"], 1, 1, 1),             # country codes in any case, as the spec's country parameter
    (["country==us"], 5, 3, 3),
    (["props:plan==pro"], 1, 0, 1),
    (["entry_page==/live"], 1, 1, 1),
    (["page~=PRIC", "event==signup"], 1, 0, 1),
    (["referrer~=google"], 1, 1, 1),
])
async def test_filters_on_the_overview(client, site, terms, events, pageviews, visitors):
    status, body = await get(client, "overview", [("siteId", site.site_id), ("range", "24h"),
                                                  *[("filter", t) for t in terms]])
    assert status == 200, body
    assert (body["totalEvents"], body["totalPageviews"], body["uniqueVisitors"]) == (events, pageviews, visitors)


async def test_filters_apply_to_top_lists_and_series(client, site):
    base = [("siteId", site.site_id), ("range", "24h"), ("filter", "country==US")]
    _, pages = await get(client, "top-pages", base)
    assert [(r["key"], r["count"]) for r in pages["data"]] == [("/", 1), ("/live", 1), ("/pricing", 1)]
    _, series = await get(client, "timeseries", base)
    assert sum(p["value"] for p in series["data"]) == 3


async def test_an_event_filter_term_counts_as_the_event_name_does(client, site):
    """`filter=event==signup` is the spec's `eventName=signup` in the filter= vocabulary: the overview's
    series and top lists, /timeseries and /top-* count the signups, as they do for eventName. They dropped
    the term and counted every pageview, so the overview read 0 pageviews beside a chart of 4."""
    base = [("siteId", site.site_id), ("range", "24h")]
    _, named = await get(client, "overview", [*base, ("eventName", "signup")])
    _, termed = await get(client, "overview", [*base, ("filter", "event==signup")])
    assert termed == named
    assert (termed["totalEvents"], termed["totalPageviews"]) == (1, 0)
    assert sum(p["value"] for p in termed["timeSeries"]) == 1
    assert [(r["key"], r["count"]) for r in termed["topPages"]] == [("/pricing", 1)]
    assert [(r["key"], r["count"]) for r in termed["topCountries"]] == [("US", 1)]
    _, series = await get(client, "timeseries", [*base, ("filter", "event==signup")])
    assert (sum(p["value"] for p in series["data"]), series["eventName"]) == (1, "signup")
    _, pages = await get(client, "top-pages", [*base, ("filter", "event==signup")])
    assert (pages["data"], pages["total"]) == ([{"key": "/pricing", "count": 1, "percentage": 100.0}], 1)
    # Excluding pageviews leaves none to chart, as the headline says; excluding another event keeps them all.
    _, none = await get(client, "overview", [*base, ("filter", "event!=pageview")])
    assert (none["totalPageviews"], sum(p["value"] for p in none["timeSeries"]), none["topPages"]) == (0, 0, [])
    _, kept = await get(client, "overview", [*base, ("filter", "event!=signup")])
    assert kept["totalPageviews"] == sum(p["value"] for p in kept["timeSeries"]) == 4


async def test_an_event_goal_filter_counts_the_goals_event(client, site, database_url):
    """Under `goal==signup` (an event goal) the overview's series and lists, /timeseries and /top-* count the
    signups, as the dashboard's chart and the page breakdown do (Plausible's conversions by page); they
    counted pageviews that were signups, i.e. nothing. A page goal's events are pageviews already."""
    await add_signup_goal(database_url, site.site_id)
    base = [("siteId", site.site_id), ("range", "24h"), ("filter", "goal==signup")]
    _, body = await get(client, "overview", base)
    assert (body["totalEvents"], sum(p["value"] for p in body["timeSeries"])) == (1, 1)
    assert [(r["key"], r["count"]) for r in body["topPages"]] == [("/pricing", 1)]
    _, series = await get(client, "timeseries", base)
    assert (sum(p["value"] for p in series["data"]), series["eventName"]) == (1, "signup")
    _, pages = await get(client, "top-pages", base)
    assert pages["total"] == 1
    _, unknown = await get(client, "overview", [*base[:2], ("filter", "goal==No such goal")])
    assert (unknown["totalEvents"], sum(p["value"] for p in unknown["timeSeries"]), unknown["topPages"]) == (0, 0, [])


@pytest.mark.parametrize("bad", ["bogus==x", "page", "page==", "goal~=x", "props:==x"])
async def test_bad_filters_are_400(client, site, bad):
    status, body = await get(client, "overview", [("siteId", site.site_id), ("filter", bad)])
    assert status == 400
    assert body["error"] == "invalid filter"


async def test_bad_breakdown_parameters_are_400(client, site):
    for params, error in [([("property", "nope")], "invalid property"),
                          ([("property", "page"), ("metrics", "visitors,nope")], "invalid metrics"),
                          ([("property", "page"), ("metrics", "conversion_rate")],
                           "conversion_rate needs property=goal or a goal filter")]:
        status, body = await get(client, "breakdown", [("siteId", site.site_id), *params])
        assert (status, body["error"]) == (400, error)


async def _add_goals(database_url: str, site_id: str) -> None:
    """The site's two goals: the signup event and a visit to /pricing."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("INSERT INTO goals (id, site_id, goal_type, event_name) VALUES ($1, $2, 'event', 'signup')",
                           f"g1-{site_id}", site_id)
        await conn.execute("INSERT INTO goals (id, site_id, goal_type, page_path) VALUES ($1, $2, 'page', '/pricing')",
                           f"g2-{site_id}", site_id)
    finally:
        await conn.close()


async def test_goals_in_breakdowns_and_filters(client, site, database_url):
    await _add_goals(database_url, site.site_id)
    base = [("siteId", site.site_id), ("range", "24h")]
    _, goals = await get(client, "breakdown", [*base, ("property", "goal"),
                                               ("metrics", "visitors,events,conversion_rate")])
    assert goals["data"] == [
        {"key": "Visit /pricing", "visitors": 1, "events": 1, "conversion_rate": 33.33},
        {"key": "signup", "visitors": 1, "events": 1, "conversion_rate": 33.33},
    ]
    # A goal filter narrows the conversions, not the base of the rate (the dashboard's Goals panel keeps
    # showing the chosen goal's own rate). It lists the goals the filter keeps, as Plausible does: the
    # other goal's row read "0 conversions" though its visitor had converted on both.
    _, chosen = await get(client, "breakdown", [*base, ("property", "goal"), ("filter", "goal==signup"),
                                                ("metrics", "visitors,events,conversion_rate")])
    assert chosen["data"] == [{"key": "signup", "visitors": 1, "events": 1, "conversion_rate": 33.33}]
    _, others = await get(client, "breakdown", [*base, ("property", "goal"), ("filter", "goal!=signup"),
                                                ("metrics", "visitors,events,conversion_rate")])
    assert others["data"] == [{"key": "Visit /pricing", "visitors": 1, "events": 1, "conversion_rate": 33.33}]
    _, pages = await get(client, "breakdown", [*base, ("property", "page"), ("filter", "goal==signup"),
                                               ("metrics", "visitors,conversion_rate")])
    assert pages["data"] == [{"key": "/pricing", "visitors": 1, "conversion_rate": 100.0}]
    # Over 30 days the base (v1, v2, v3, v5) takes whole days from the day rows and the rest from the events;
    # under a filter, from the matching events.
    month = [("siteId", site.site_id), ("range", "30d")]
    _, overview = await get(client, "overview", month)
    assert overview["uniqueVisitors"] == 4
    for terms, rate in (([], 25.0), ([("filter", "country==US")], 25.0), ([("filter", "country==FR")], 0.0)):
        _, goals = await get(client, "breakdown", [*month, *terms, ("property", "goal"),
                                                   ("metrics", "visitors,conversion_rate")])
        assert [(g["key"], g["conversion_rate"]) for g in goals["data"]] == [("Visit /pricing", rate),
                                                                             ("signup", rate)], terms
    _, overview = await get(client, "overview", [*base, ("filter", "goal!=signup")])
    assert overview["totalEvents"] == 5
    _, unknown = await get(client, "overview", [*base, ("filter", "goal==No such goal")])
    assert unknown["totalEvents"] == 0


async def test_goal_breakdown_and_property_keys_page_with_limit_and_offset(client, site, database_url):
    """The goal breakdown and the property keys take limit and offset as every list does: the goals came
    whole whatever the limit and offset the answer echoed, and property-keys ignored offset."""
    await _add_goals(database_url, site.site_id)
    base = [("siteId", site.site_id), ("range", "24h")]
    _, goals = await get(client, "breakdown", [*base, ("property", "goal"), ("limit", "1"), ("offset", "1")])
    assert (goals["data"], goals["limit"], goals["offset"]) == ([{"key": "signup", "visitors": 1}], 1, 1)
    _, first = await get(client, "breakdown", [*base, ("property", "goal"), ("limit", "1")])
    assert first["data"] == [{"key": "Visit /pricing", "visitors": 1}]
    _, keys = await get(client, "property-keys", [*base, ("range", "7d")])
    assert [k["key"] for k in keys["data"]] == ["href", "plan"]
    _, rest = await get(client, "property-keys", [*base, ("limit", "1"), ("offset", "1")])
    assert rest == {"data": [{"key": "plan", "events": 1}], "limit": 1}
    status, bad = await get(client, "property-keys", [*base, ("offset", "-1")])
    assert (status, bad) == (400, {"error": "invalid offset"})


async def test_referrer_breakdown_leaves_out_the_sites_own_pages(client, site, database_url):
    """A breakdown by referrer lists where visitors came from, as /top-referrers does and as Plausible's
    referrer breakdown does: a referrer on the site's own domain or a subdomain (internal navigation, the most
    common referrer of a multi-page site) is no row. It was listed like any other. Over 30 days the ended
    days' rows come from cached states, which leave them out too; has-values agrees."""
    conn = await asyncpg.connect(database_url)
    try:
        now = site.now
        await events_store.copy_events(conn, [
            EventRow(new_id("evt"), site.workspace_id, "live", "pageview", now - D * i - 3 * M, now - D * i - 3 * M,
                     site_id=site.site_id, session_id=f"own{i}", path="/next", ip_hash=f"own{i}",
                     referrer=f"https://{host}{site.domain}/from")
            for i, host in ((0, ""), (2, "www."), (3, "blog."))])
    finally:
        await conn.close()
    for range_name in ("24h", "30d", "30d"):  # the second 30-day read takes the states the first one made
        base = [("siteId", site.site_id), ("range", range_name)]
        for metrics in ("visitors", "visitors,pageviews,bounce_rate"):
            _, body = await get(client, "breakdown", [*base, ("property", "referrer"), ("metrics", metrics)])
            keys = [r["key"] for r in body["data"]]
            assert keys and not any(site.domain in k for k in keys), (range_name, metrics, keys)
    _, only_own = await get(client, "has-values", [("siteId", site.site_id), ("range", "24h"),
                                                   ("properties", "referrer"), ("filter", "page==/next")])
    assert only_own["data"] == {"referrer": False}


async def test_compare_with_the_previous_period(client, site):
    _, body = await get(client, "overview", [("siteId", site.site_id), ("range", "30d"),
                                             ("compare", "previous_period")])
    assert body["totalEvents"] == 8
    c = body["comparison"]
    assert (c["totalEvents"], c["totalPageviews"], c["uniqueVisitors"], c["sessions"], c["bounceRate"]) == \
        (1, 1, 1, 1, 100.0)
    assert body["change"]["totalEvents"] == 700.0
    assert body["change"]["uniqueVisitors"] == 300.0
    assert body["change"]["bounceRate"] == -50.0
    _, series = await get(client, "timeseries", [("siteId", site.site_id), ("range", "30d"),
                                                 ("compare", "previous_period")])
    assert len(series["comparison"]) == len(series["data"]) == 30
    assert sum(p["value"] for p in series["comparison"]) == 1
    assert series["change"] == 500.0
    _, quiet = await get(client, "overview", [("siteId", site.site_id), ("range", "24h"),
                                              ("compare", "year_over_year")])
    assert quiet["comparison"]["totalEvents"] == 0 and quiet["change"]["totalEvents"] is None
    # A period without visits has no bounce rate: no change in points against its 0 (the dashboard said
    # "+50 pts vs 0%"), as the visit duration has none.
    assert quiet["bounceRate"] > 0 and quiet["comparison"]["sessions"] == 0
    assert quiet["change"]["bounceRate"] is None and quiet["change"]["avgSessionDuration"] is None
    status, bad = await get(client, "overview", [("siteId", site.site_id), ("compare", "nope")])
    assert (status, bad["error"]) == (400, "invalid compare")


async def test_has_values_answers_whether_each_breakdown_has_rows(client, site, database_url):
    # One event with a region and a city (a GeoIP City database fills them at ingestion), five days ago in DE.
    conn = await asyncpg.connect(database_url)
    try:
        at = site.now - 5 * D
        await events_store.copy_events(conn, [EventRow(
            new_id("evt"), site.workspace_id, "live", "pageview", at, at, site_id=site.site_id, session_id="s9",
            path="/de", country="DE", ip_hash="v9", region="Bavaria", city="Munich")])
    finally:
        await conn.close()
    props = ["region", "city", "country", "page", "referrer", "utm_source", "browser"]
    base = [("siteId", site.site_id), ("properties", ",".join(props))]
    status, day = await get(client, "has-values", [*base, ("range", "24h")])
    assert status == 200, day
    assert day == {"data": {"region": False, "city": False, "country": True, "page": True, "referrer": True,
                            "utm_source": False, "browser": False}}
    _, week = await get(client, "has-values", [*base, ("range", "7d")])
    assert (week["data"]["region"], week["data"]["city"]) == (True, True)
    # Filters narrow it as they narrow a breakdown.
    _, us = await get(client, "has-values", [*base, ("range", "7d"), ("filter", "country==US")])
    assert (us["data"]["region"], us["data"]["country"]) == (False, True)
    # The same answer as "the breakdown has a row", for every property it takes.
    every = [("siteId", site.site_id), ("range", "7d"), ("properties", "referrer,region,city,country,page,source,"
                                                                     "channel,utm_medium,os,device")]
    _, some = await get(client, "has-values", every)
    for prop, has in some["data"].items():
        _, rows = await get(client, "breakdown", [("siteId", site.site_id), ("range", "7d"), ("property", prop)])
        assert has == bool(rows["data"]), prop
    for bad in ("", "event", "entry_page", "goal", "region,nope", "props:plan"):
        status, body = await get(client, "has-values", [("siteId", site.site_id), ("range", "7d"),
                                                        ("properties", bad)])
        assert (status, body["error"]) == (400, "invalid properties"), bad
        assert "region" in body["allowed"] and "event" not in body["allowed"]
    status, body = await get(client, "has-values", [*base, ("range", "7d"), ("filter", "nope==1")])
    assert (status, body["error"]) == (400, "invalid filter")
    status, _ = await get(client, "has-values", [("siteId", "site-of-nobody"), ("range", "7d"),
                                                 ("properties", "region")])
    assert status == 404


async def test_property_keys_list_what_props_breakdowns_can_name(client, site, database_url):
    await add_signup_goal(database_url, site.site_id)
    base = [("siteId", site.site_id), ("range", "24h")]
    status, body = await get(client, "property-keys", base)
    assert status == 200, body
    assert body == {"data": [{"key": "href", "events": 1}, {"key": "plan", "events": 1}], "limit": 20}
    # Within a goal: the keys its conversions carry, which the dashboard's drill-down offers.
    _, within = await get(client, "property-keys", [*base, ("filter", "goal==signup")])
    assert within["data"] == [{"key": "plan", "events": 1}]
    _, one = await get(client, "property-keys", [*base, ("limit", "1")])
    assert one == {"data": [{"key": "href", "events": 1}], "limit": 1}
    _, old = await get(client, "property-keys", [("siteId", site.site_id), ("range", "1h")])
    assert old["data"] == []
    status, bad = await get(client, "property-keys", [*base, ("filter", "nope==1")])
    assert (status, bad["error"]) == (400, "invalid filter")


def _admits(schema: dict, value: str) -> bool:
    """Whether a string parameter's schema (of the keywords these two use) admits `value`."""
    return (("enum" not in schema or value in schema["enum"])
            and ("pattern" not in schema or re.search(schema["pattern"], value) is not None)
            and ("anyOf" not in schema or any(_admits(s, value) for s in schema["anyOf"])))


async def test_the_api_document_names_exactly_the_properties_accepted(client, site):
    """/openapi.json lists the properties a breakdown and has-values take, as their 400 answers do."""
    doc = await (await client.get("/openapi.json")).json()
    for route, param in (("breakdown", "property"), ("has-values", "properties")):
        status, body = await get(client, route, [("siteId", site.site_id), (param, "nope")])
        assert status == 400
        parameters = doc["paths"][f"/api/analytics/{route}"]["get"]["parameters"]
        described = next(p["description"] for p in parameters if p["name"] == param)
        named = set(re.findall(r"[a-z_]+(?::<key>)?", described)) - {"comma", "list", "of", "or"}
        assert named == set(body["allowed"]), route
        # Its schema admits what the handler takes and refuses what it refuses (a generated client sends no 400).
        schema = next(p["schema"] for p in parameters if p["name"] == param)
        taken = [v.replace("<key>", "plan") for v in body["allowed"]]
        if param == "properties":
            taken += [",".join(taken), f",{taken[0]},,{taken[-1]},"]
        for value in [*taken, "nope", "", "props:", ",", "browser,nope"]:
            accepted = (await get(client, route, [("siteId", site.site_id), (param, value)]))[0] == 200
            assert _admits(schema, value) == accepted, (route, value)
