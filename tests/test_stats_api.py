"""POST /api/v2/query, Plausible's Stats API: the requests of Plausible's documentation, with a Tally key,
answered with the numbers the dashboard shows for the same days, in Plausible's shape; what Tally does not
offer is a 400 that says so and reads nothing."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from app.appkeys import ANALYTICS
from storage.ids import new_id
from tests.analytics_support import add_signup_goal, insert_events, load_fixture
from tests.conftest import bearer, connect
from tests.test_analytics import get


@pytest.fixture
async def stats(client, database_url, workspace, make_key, login):
    """The fixture site (events of the last 40 days), a read key of its workspace, and a dashboard session to
    read the same numbers the dashboard's way."""
    site = await load_fixture(database_url, workspace)
    await add_signup_goal(database_url, site.site_id)
    await login()
    key = await make_key("read")

    async def query(body: dict, key: str | None = key, status: int = 200) -> dict:
        resp = await client.post("/api/v2/query", json=body, headers=bearer(key) if key else {})
        answer = await resp.json()
        assert resp.status == status, answer
        if key:
            assert "X-RateLimit-Remaining" in resp.headers
        return answer

    query.site = site
    return query


async def test_an_aggregate_is_the_overviews_numbers(stats, client):
    site = stats.site
    answer = await stats({"site_id": site.domain, "date_range": "30d", "metrics": [
        "visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration", "views_per_visit"]})
    status, overview = await get(client, "overview", siteId=site.site_id, range="30d")
    assert status == 200
    assert answer["results"] == [{"dimensions": [], "metrics": [
        overview["uniqueVisitors"], overview["sessions"], overview["totalPageviews"], overview["totalEvents"],
        overview["bounceRate"], round(overview["avgSessionDuration"] / 1000),
        round(overview["totalPageviews"] / overview["sessions"], 2)]}]
    # the fixture's last 30 days: four visitors, six pageviews, eight events (the 40-day-old one is out)
    assert answer["results"][0]["metrics"][:4] == [4, 4, 6, 8]
    assert answer["meta"] == {}
    query = answer["query"]
    assert (query["site_id"], query["metrics"][0]) == (site.domain, "visitors")
    today = datetime.now(UTC).date()
    assert query["date_range"] == [f"{today - timedelta(days=29)}T00:00:00+00:00", f"{today}T23:59:59+00:00"]


async def test_the_site_may_be_named_by_tallys_id_and_days_as_two_dates(stats):
    today = datetime.now(UTC).date()
    answer = await stats({"site_id": stats.site.site_id, "metrics": ["pageviews"],
                          "date_range": [str(today - timedelta(days=41)), str(today - timedelta(days=39))]})
    assert answer["results"] == [{"metrics": [1], "dimensions": []}]  # /old, 40 days ago


async def test_a_breakdown_by_a_visit_dimension_is_the_dashboards_breakdown(stats, client):
    site = stats.site
    metrics = ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"]
    answer = await stats({"site_id": site.domain, "date_range": "30d", "metrics": [*metrics, "percentage"],
                          "dimensions": ["visit:country"]})
    status, breakdown = await get(client, "breakdown", siteId=site.site_id, range="30d", property="country",
                                  metrics=",".join(metrics))
    assert status == 200
    assert answer["results"] == [
        {"dimensions": [r["key"]], "metrics": [r["visitors"], r["visits"], r["pageviews"], r["bounce_rate"],
                                               round(r["visit_duration"] / 1000), round(100 * r["visitors"] / 4, 2)]}
        for r in breakdown["data"]]
    assert [r["dimensions"][0] for r in answer["results"]] == ["US", "DE", "FR"]


async def test_filters_narrow_as_the_dashboards_filters_do(stats, client):
    site = stats.site
    filters = [["is", "visit:country", ["us"]], ["and", [["contains", "event:page", ["PRIC"]]]],
               ["is_not", "event:name", ["outbound"]]]
    answer = await stats({"site_id": site.domain, "date_range": "7d", "metrics": ["visitors", "events"],
                          "filters": filters})
    status, overview = await get(client, "overview", siteId=site.site_id, range="7d", filter=[
        "country==US", "page~=PRIC", "event!=outbound"])
    assert status == 200
    assert answer["results"][0]["metrics"] == [overview["uniqueVisitors"], overview["totalEvents"]] == [1, 2]


async def test_a_filter_of_several_values_matches_any_and_is_not_none(stats):
    """Germany or France: the events of either, none counted twice (each event has one country); and those of
    neither, the rest."""
    async def events(*filters) -> int:
        answer = await stats({"site_id": stats.site.domain, "date_range": "30d", "metrics": ["events"],
                              "filters": list(filters)})
        return answer["results"][0]["metrics"][0]

    every, de, fr = await events(), await events(["is", "visit:country", ["DE"]]), \
        await events(["is", "visit:country", ["fr"]])
    assert (de, fr) == (1, 1)
    assert await events(["is", "visit:country", ["DE", "fr"]]) == de + fr
    assert await events(["is_not", "visit:country", ["DE", "FR"]]) == every - de - fr
    assert await events(["contains", "event:page", ["PRIC", "/BLOG"]]) == \
        await events(["contains", "event:page", ["pric"]]) + await events(["contains", "event:page", ["blog"]])
    assert await events(["contains", "event:page", ["/blog"], {"case_sensitive": False}]) == 1
    assert await events(["is", "event:page", ["/blog/**", "/old"], {"case_sensitive": True}]) == 1  # 30 days


async def test_several_dimensions_are_each_pairs_numbers(stats):
    """Country and page: each pair's visitors and pageviews are those of the page breakdown under a filter on
    that country; day and country likewise the day's under a filter on the country."""
    site = stats.site
    body = {"site_id": site.domain, "date_range": "30d", "metrics": ["visitors", "pageviews"]}
    pairs = await stats({**body, "dimensions": ["visit:country", "event:page"]})
    assert pairs["results"]
    for country in {r["dimensions"][0] for r in pairs["results"]}:
        pages = await stats({**body, "dimensions": ["event:page"], "filters": [["is", "visit:country", [country]]]})
        assert sorted([r["dimensions"][1:], r["metrics"]] for r in pairs["results"] if r["dimensions"][0] == country) \
            == sorted([r["dimensions"], r["metrics"]] for r in pages["results"])
    by_day = await stats({**body, "dimensions": ["time:day", "visit:country"], "include": {"time_labels": True}})
    assert [r["dimensions"][0] for r in by_day["results"]] == sorted(r["dimensions"][0] for r in by_day["results"])
    us = await stats({**body, "dimensions": ["time:day"], "filters": [["is", "visit:country", ["US"]]]})
    assert [[r["dimensions"][0], r["metrics"]] for r in by_day["results"] if r["dimensions"][1] == "US"] == \
        [[r["dimensions"][0], r["metrics"]] for r in us["results"]]
    assert len(by_day["meta"]["time_labels"]) == 30


async def test_several_dimensions_keep_any_text_a_property_holds(stats, database_url):
    """A property's value may hold any character but NUL: a control character or a quote stays in its own
    dimension."""
    site = stats.site
    odd = 'a\x1fb",c'
    conn = await connect(database_url)
    try:
        await insert_events(conn, site.site_id, site.workspace_id, [
            (new_id("evt"), "signup", "/x", None, "DE", f"odd-{site.site_id}", f"odd-{site.site_id}",
             datetime.now(UTC) - timedelta(minutes=5), {"plan": odd})])
    finally:
        await conn.close()
    answer = await stats({"site_id": site.domain, "date_range": "7d", "metrics": ["events"],
                          "dimensions": ["event:props:plan", "visit:country"]})
    assert sorted(r["dimensions"] for r in answer["results"]) == [[odd, "DE"], ["pro", "US"]]


async def test_a_custom_property_breaks_down_a_goals_conversions(stats):
    answer = await stats({"site_id": stats.site.domain, "date_range": "7d", "dimensions": ["event:props:plan"],
                          "metrics": ["visitors", "events", "conversion_rate"],
                          "filters": [["is", "event:goal", ["signup"]]]})
    assert answer["results"] == [{"dimensions": ["pro"], "metrics": [1, 1, 100.0]}]


async def test_goals_convert_as_on_the_dashboard(stats, client):
    site = stats.site
    answer = await stats({"site_id": site.domain, "date_range": "7d", "dimensions": ["event:goal"],
                          "metrics": ["visitors", "events", "conversion_rate"]})
    status, goals = await get(client, "breakdown", siteId=site.site_id, range="7d", property="goal",
                              metrics="visitors,events,conversion_rate")
    assert status == 200
    assert answer["results"] == [{"dimensions": [r["key"]], "metrics": [r["visitors"], r["events"],
                                                                        r["conversion_rate"]]} for r in goals["data"]]
    assert answer["results"][0]["dimensions"] == ["signup"] and answer["results"][0]["metrics"][2] > 0


async def test_a_time_dimension_gives_each_days_numbers_and_labels(stats, client):
    site = stats.site
    answer = await stats({"site_id": site.domain, "date_range": "7d", "dimensions": ["time:day"],
                          "metrics": ["pageviews", "visitors"], "include": {"time_labels": True}})
    today = datetime.now(UTC).date()
    days = [str(today - timedelta(days=6 - i)) for i in range(7)]
    assert answer["meta"]["time_labels"] == days
    status, series = await get(client, "timeseries", siteId=site.site_id, range="custom", interval="day",
                               **{"from": days[0], "to": days[-1]})
    assert status == 200
    # only the days with events, oldest first, each with the dashboard's pageviews of the day
    by_day = {p["timestamp"][:10]: p["value"] for p in series["data"] if p["value"]}
    assert [r["dimensions"][0] for r in answer["results"]] == sorted(by_day)
    assert {r["dimensions"][0]: r["metrics"][0] for r in answer["results"]} == by_day
    assert sum(r["metrics"][0] for r in answer["results"]) == 6

    # "time" over one day is by the hour: every hour of today on the site's clock
    hourly = await stats({"site_id": site.domain, "date_range": "day", "dimensions": ["time"],
                          "metrics": ["events"], "include": {"time_labels": True}})
    assert hourly["meta"]["time_labels"] == [f"{today} {h:02}:00:00" for h in range(24)]
    assert {r["dimensions"][0] for r in hourly["results"]} <= set(hourly["meta"]["time_labels"])
    week = await stats({"site_id": site.domain, "date_range": "7d", "dimensions": ["time:hour"],
                        "metrics": ["events"]})
    assert sum(r["metrics"][0] for r in week["results"]) == 8  # every event of the 7 days, in its hour
    assert all(r["dimensions"][0].endswith(":00:00") for r in week["results"])


async def test_weeks_and_months_begin_on_mondays_and_firsts(stats):
    site = stats.site
    weeks = await stats({"site_id": site.domain, "date_range": "30d", "dimensions": ["time:week"],
                         "metrics": ["pageviews"], "include": {"time_labels": True}})
    labels = weeks["meta"]["time_labels"]
    assert all(date.fromisoformat(d).weekday() == 0 for d in labels) and len(labels) in (5, 6)
    assert {r["dimensions"][0] for r in weeks["results"]} <= set(labels)
    assert sum(r["metrics"][0] for r in weeks["results"]) == 6  # every pageview of the 30 days, once
    months = await stats({"site_id": site.domain, "date_range": "12mo", "dimensions": ["time"],
                          "metrics": ["pageviews"], "include": {"time_labels": True}})  # by the month
    assert len(months["meta"]["time_labels"]) == 12 and all(d.endswith("-01") for d in months["meta"]["time_labels"])
    assert sum(r["metrics"][0] for r in months["results"]) == 7


async def test_unfiltered_visitors_by_day_week_and_month_come_from_the_day_sets(stats, client):
    """Visitors alone, unfiltered, over whole days of a UTC site: merged from each day's visitor set, the same
    numbers as counted from the events (which another metric makes the read count); with the events gone from
    the store, the day sets still answer."""
    site = stats.site
    body = {"site_id": site.domain, "date_range": "30d"}
    fast = {}
    for dim in ("time:day", "time:week", "time:month"):
        from_sets = await stats({**body, "dimensions": [dim], "metrics": ["visitors"]})
        counted = await stats({**body, "dimensions": [dim], "metrics": ["visitors", "events"]})
        fast[dim] = [(r["dimensions"], r["metrics"][0]) for r in from_sets["results"]]
        assert fast[dim] == [(r["dimensions"], r["metrics"][0]) for r in counted["results"]] and fast[dim]
    await client.app[ANALYTICS].delete_where("site_events", "site_id = {s:String}", {"s": site.site_id})
    for dim, before in fast.items():
        from_sets = await stats({**body, "dimensions": [dim], "metrics": ["visitors"]})
        assert [(r["dimensions"], r["metrics"][0]) for r in from_sets["results"]] == before
        assert (await stats({**body, "dimensions": [dim], "metrics": ["visitors", "events"]}))["results"] == []


async def test_order_by_and_pagination(stats):
    body = {"site_id": stats.site.domain, "date_range": "30d", "dimensions": ["event:page"],
            "metrics": ["pageviews", "visitors"]}
    default = await stats(body)  # by the first metric, descending
    assert [r["metrics"][0] for r in default["results"]] == sorted((r["metrics"][0] for r in default["results"]),
                                                                    reverse=True)
    ordered = await stats({**body, "order_by": [["event:page", "asc"]], "pagination": {"limit": 2, "offset": 1}})
    pages = sorted(r["dimensions"][0] for r in default["results"])
    assert [r["dimensions"][0] for r in ordered["results"]] == pages[1:3]


def nested(depth: int) -> list:
    """A filter `and` of an `and` ... `depth` deep."""
    filters: list = [["is", "visit:country", ["US"]]]
    for _ in range(depth):
        filters = [["and", filters]]
    return filters


@pytest.mark.parametrize(("body", "error"), [
    ({"site_id": ""}, "site_id is required: the site's domain"),
    ({"metrics": ["visitorz"]}, "invalid metric: visitorz"),
    ({"metrics": ["visitors"], "date_range": "2y"}, "invalid date_range: day, 7d, 28d, 30d, 91d, month, 6mo, 12mo, "
                                                    "year, all, or [first, last] days"),
    ({"dimensions": ["visit:country", "visit:browser", "visit:os", "visit:device"]}, "at most 3 dimensions"),
    ({"dimensions": ["event:goal", "visit:country"]},
     "event:goal, visit:entry_page and visit:exit_page break a query down alone"),
    ({"dimensions": ["time:day", "time"]}, "one time dimension at most"),
    ({"dimensions": ["visit:os", "visit:os"]}, "a dimension may be asked for once"),
    ({"dimensions": ["visit:city"]}, "Tally does not keep visit:city: use visit:city_name"),
    ({"filters": [["or", [["is", "visit:country", ["US"]]]]]},
     "Tally does not offer the or filter: only is, is_not, contains and and"),
    ({"filters": [["is", "visit:country", ["US"] * 101]]}, "a filter takes at most 100 values"),
    ({"filters": [["is", "visit:country", []]]}, "a filter is [operator, dimension, [values]]"),
    ({"filters": [["contains", "event:page", ["/p"], {"case_sensitive": True}]]},
     "Tally's contains ignores case and its is and is_not match exactly: case_sensitive may only say so"),
    ({"filters": [["is", "event:page", ["/p"], {"case_sensitive": False}]]},
     "Tally's contains ignores case and its is and is_not match exactly: case_sensitive may only say so"),
    ({"filters": [["is", "time:day", ["2026-01-01"]]]}, "time is not a filter: set date_range"),
    ({"metrics": ["conversion_rate"]}, "conversion_rate needs the event:goal dimension or filter"),
    ({"metrics": ["scroll_depth"]}, "scroll_depth needs the event:page dimension, alone"),
    ({"pagination": {"limit": 0}}, "pagination: limit 1 to 10000, offset 0 or more"),
    ({"date_range": ["2026-01-02", "2026-01-01"]},
     "date_range: the first day not after the last, at most 2200 days, from 2000"),
    ({"segments": []}, "unknown key: segments"),
    ({"filters": nested(9)}, "and filters nest at most 8 deep"),
])
async def test_what_tally_does_not_offer_is_a_400_naming_it(stats, body, error):
    answer = await stats({"site_id": stats.site.domain, "metrics": ["visitors"], "date_range": "7d", **body},
                         status=400)
    assert answer == {"error": error}


async def test_the_key_must_read_a_site_of_its_workspace(stats, client, make_key):
    body = {"site_id": stats.site.domain, "metrics": ["visitors"], "date_range": "7d"}
    assert await stats(body, key=None, status=401) == {"error": "missing Authorization: Bearer <API key>"}
    assert await stats(body, key="tly_live_nope", status=401) == {"error": "invalid or expired API key"}
    assert await stats(body, key=await make_key("write"), status=403) == {
        "error": "this key lacks the 'read' scope"}
    other = await make_key("read", workspace_name="another-workspace")
    assert await stats(body, key=other, status=404) == {
        "error": "site not found: name a site of this key's workspace by its domain"}
    # no dashboard session is asked for, and no same-origin rule applies: the key is the credential
    client.session.cookie_jar.clear()
    resp = await client.post("/api/v2/query", json=body, headers={**bearer(await make_key("read")),
                                                                   "Origin": "https://elsewhere.example"})
    assert resp.status == 200
