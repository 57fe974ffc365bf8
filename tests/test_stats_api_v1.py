"""Plausible's legacy Stats API (v1) through a real, unchanged client: `plausible-mcp` (PyPI), the assistant tools
that read Plausible's /api/v1/stats endpoints, pointed at Tally with its PLAUSIBLE_BASE_URL and a Tally key.
Its answers are the dashboard's numbers for the same days."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, date, datetime, timedelta

import pytest

from tests.analytics_support import load_fixture
from tests.conftest import bearer
from tests.site_helpers import post_event, register_site
from tests.test_analytics import get


@pytest.fixture
async def plausible_mcp(client, database_url, workspace, make_key, login, monkeypatch):
    """The client's tool functions, reaching this test's server with a read key of the workspace; they block
    (urllib), so each runs in a thread."""
    monkeypatch.setenv("PLAUSIBLE_BASE_URL", str(client.make_url("")).rstrip("/"))
    monkeypatch.setenv("PLAUSIBLE_API_KEY", await make_key("read"))
    monkeypatch.setenv("DO_NOT_TRACK", "1")  # its anonymous usage telemetry
    from plausible_mcp import server

    async def call(tool: str, *args, **kwargs) -> dict | str:
        out = await asyncio.to_thread(getattr(server, tool), *args, **kwargs)
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            return out  # the client's own error text

    await login()
    call.site = await load_fixture(database_url, workspace)
    call.client = client
    return call


async def test_aggregate_stats_are_the_overviews(plausible_mcp, client):
    site = plausible_mcp.site
    out = await plausible_mcp("get_aggregate_stats", site.domain, "30d",
                              ["visitors", "pageviews", "bounce_rate", "visit_duration", "visits", "events"])
    status, overview = await get(client, "overview", siteId=site.site_id, range="30d")
    assert status == 200
    assert out["totals"] == {"visitors": overview["uniqueVisitors"], "pageviews": overview["totalPageviews"],
                             "bounce_rate": overview["bounceRate"],
                             "visit_duration": round(overview["avgSessionDuration"] / 1000),
                             "visits": overview["sessions"], "events": overview["totalEvents"]}
    assert (out["totals"]["visitors"], out["totals"]["pageviews"]) == (4, 6)


async def test_a_days_range_and_yesterday_reach_the_days_asked_for(plausible_mcp):
    site = plausible_mcp.site
    today = datetime.now(UTC).date()
    span = f"{today - timedelta(days=41)},{today - timedelta(days=39)}"  # the pageview of /old, 40 days ago
    out = await plausible_mcp("get_aggregate_stats", site.domain, span, ["pageviews"])
    assert out["totals"] == {"pageviews": 1}
    yesterday = await plausible_mcp("get_aggregate_stats", site.domain, "yesterday", ["pageviews"])
    day = str(today - timedelta(days=1))  # the client's yesterday, by this machine's clock (UTC)
    status, overview = await get(plausible_mcp.client, "overview", siteId=site.site_id, range="custom",
                                 **{"from": day, "to": day})
    assert status == 200
    assert yesterday["period"] == "day" and yesterday["totals"] == {"pageviews": overview["totalPageviews"]}


async def test_breakdowns_are_the_dashboards(plausible_mcp, client):
    site = plausible_mcp.site
    pages = await plausible_mcp("get_breakdown", site.domain, "event:page", "30d", limit=20)
    status, dashboard = await get(client, "breakdown", siteId=site.site_id, range="30d", property="page")
    assert status == 200
    assert pages["results"] == [{"page": r["key"], "visitors": r["visitors"]} for r in dashboard["data"]]
    countries = await plausible_mcp("get_breakdown", site.domain, "country", "30d", limit=2)  # its alias
    assert countries["results"] == [{"country": "US", "visitors": 4}, {"country": "DE", "visitors": 1}]


async def test_a_timeseries_has_every_day_of_the_period(plausible_mcp, client):
    site = plausible_mcp.site
    out = await plausible_mcp("get_timeseries", site.domain, "7d")
    today = datetime.now(UTC).date()
    assert [p["date"] for p in out["timeseries"]] == [str(today - timedelta(days=6 - i)) for i in range(7)]
    resp = await client.post("/api/v2/query", headers=bearer(os.environ["PLAUSIBLE_API_KEY"]), json={
        "site_id": site.domain, "date_range": "7d", "metrics": ["visitors"], "dimensions": ["time:day"]})
    by_day = {r["dimensions"][0]: r["metrics"][0] for r in (await resp.json())["results"]}
    assert {p["date"]: p["visitors"] for p in out["timeseries"] if p["visitors"]} == by_day
    assert sum(p["visitors"] for p in out["timeseries"]) == sum(by_day.values()) > 0


async def test_a_timeseries_by_month_counts_each_months_visitors(plausible_mcp, client):
    """12 months by the month (the client's interval=month; Plausible's default for 6mo and 12mo): each month's
    visitors are those of an aggregate over its days."""
    site = plausible_mcp.site
    out = await plausible_mcp("get_timeseries", site.domain, "12mo", "month")
    today = datetime.now(UTC).date()
    months = [date(today.year - (today.month - 1 - i < 0), (today.month - 1 - i) % 12 + 1, 1)
              for i in range(11, -1, -1)]
    assert [p["date"] for p in out["timeseries"]] == [str(m) for m in months]
    assert sum(p["visitors"] > 0 for p in out["timeseries"]) >= 1
    for point, first in zip(out["timeseries"], months, strict=True):
        last = (first.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
        whole = await v1(client, "aggregate", site_id=site.domain, period="custom", date=f"{first},{last}")
        assert point["visitors"] == whole["results"]["visitors"]["value"]
    default = await v1(client, "timeseries", site_id=site.domain, period="6mo")  # by the month by default
    assert [p["date"] for p in default["results"]] == [str(m) for m in months[-6:]]


async def test_realtime_visitors_count_the_last_five_minutes(plausible_mcp, database_url, workspace):
    site_id, domain = await register_site(database_url, workspace, verified=False)
    assert (await plausible_mcp("get_realtime_visitors", domain))["realtime_visitors"] == 0
    resp = await post_event(plausible_mcp.client, {"s": site_id, "n": "pageview", "p": "/now", "sid": "v1"})
    assert resp.status == 202
    assert (await plausible_mcp("get_realtime_visitors", domain))["realtime_visitors"] == 1


async def test_what_tally_does_not_offer_reaches_the_client_as_plausibles_400(plausible_mcp):
    out = await plausible_mcp("get_breakdown", plausible_mcp.site.domain, "city", "30d")
    assert out.startswith("[INPUT_FIXABLE] Plausible API error (HTTP 400): "
                          '{"error":"Tally does not keep visit:city: use visit:city_name"}')


async def test_without_a_valid_key_the_client_is_told_to_fix_its_key(plausible_mcp, monkeypatch):
    monkeypatch.setenv("PLAUSIBLE_API_KEY", "not-a-key")
    out = await plausible_mcp("get_aggregate_stats", plausible_mcp.site.domain, "7d")
    assert out.startswith("[ENVIRONMENT_FIXABLE: STOP & ASK HUMAN] Authentication failed (HTTP 401)")


async def v1(client, route: str, status: int = 200, **params) -> dict | int:
    """GET /api/v1/stats/<route> with the test's key."""
    return await plausible_get(client, f"stats/{route}", status, **params)


async def plausible_get(client, path: str, status: int = 200, **params) -> dict | int:
    resp = await client.get(f"/api/v1/{path}", params=params, headers=bearer(os.environ["PLAUSIBLE_API_KEY"]))
    body = await resp.json()
    assert resp.status == status, body
    return body


async def test_filters_compare_and_pages_as_plausibles_v1_takes_them(plausible_mcp, client):
    site = plausible_mcp.site
    out = await v1(client, "aggregate", site_id=site.domain, period="7d", metrics="visitors,events,bounce_rate",
                   filters="visit:country==US;event:name!=outbound", compare="previous_period")
    status, overview = await get(client, "overview", siteId=site.site_id, range="7d", compare="previous_period",
                                 filter=["country==US", "event!=outbound"])
    assert status == 200
    assert out["results"] == {
        "visitors": {"value": overview["uniqueVisitors"], "change": overview["change"]["uniqueVisitors"]},
        "events": {"value": overview["totalEvents"], "change": overview["change"]["totalEvents"]},
        "bounce_rate": {"value": overview["bounceRate"], "change": overview["change"]["bounceRate"]}}
    first = await v1(client, "breakdown", site_id=site.domain, property="event:page", limit=2, page=1)
    second = await v1(client, "breakdown", site_id=site.domain, property="event:page", limit=2, page=2)
    every = await v1(client, "breakdown", site_id=site.domain, property="event:page")
    assert first["results"] + second["results"] == every["results"][:4]
    hours = await v1(client, "timeseries", site_id=site.domain, period="day", interval="hour", metrics="pageviews")
    assert len(hours["results"]) == 24 and hours["results"][0]["date"].endswith(" 00:00:00")
    either = await v1(client, "aggregate", site_id=site.domain, metrics="events", filters="visit:country==DE|FR")
    assert either["results"] == {"events": {"value": 2}}  # one event from each, in the last 30 days
    month = await v1(client, "aggregate", site_id=site.domain, period="month", date="2026-02-10", metrics="visitors")
    assert month["results"] == {"visitors": {"value": 0}}


@pytest.mark.parametrize(("route", "params", "error"), [
    ("aggregate", {"period": "2y"}, "invalid period: one of day, 7d, 30d, month, 6mo, 12mo or custom"),
    ("aggregate", {"period": "custom"}, "period=custom takes date=YYYY-MM-DD,YYYY-MM-DD"),
    ("aggregate", {"period": "day", "date": "yesterday"}, "invalid date: YYYY-MM-DD, from 2000 to 2099"),
    ("aggregate", {"period": "12mo", "date": "9999-12-31"}, "invalid date: YYYY-MM-DD, from 2000 to 2099"),
    ("timeseries", {"period": "30d", "date": "0001-01-01"}, "invalid date: YYYY-MM-DD, from 2000 to 2099"),
    ("aggregate", {"filters": "visit:country=US"}, "invalid filter: visit:country=US (dimension==value or "
                                                   "dimension!=value)"),
    ("aggregate", {"compare": "year"}, "invalid compare: previous_period"),
    ("breakdown", {}, "property is required, e.g. event:page or visit:source"),
    ("breakdown", {"property": "event:page", "limit": "1001"}, "invalid limit: 1 to 1000"),
    ("timeseries", {"interval": "minute"}, "invalid interval: date, hour, week or month"),
])
async def test_a_v1_request_tally_cannot_answer_is_a_400(plausible_mcp, client, route, params, error):
    assert await v1(client, route, 400, site_id=plausible_mcp.site.domain, **params) == {"error": error}


async def test_the_clients_doctor_finds_the_keys_sites(plausible_mcp, client, database_url, workspace):
    """Plausible's Sites API lists the sites a key reads (its workspace's), which the client's `doctor` uses to
    check a key; it had answered 404, and the doctor's fallback then found no site named `healthcheck`."""
    await register_site(database_url, workspace)
    listed = await plausible_get(client, "sites")
    domains = [s["domain"] for s in listed["sites"]]
    assert plausible_mcp.site.domain in domains and len(domains) == 2
    assert listed["meta"] == {"after": None, "before": None, "limit": 100}
    doctor = await plausible_mcp("doctor")
    assert (doctor["status"], doctor["sites_accessible"]) == ("healthy", 2)
    assert sorted(doctor["sample_sites"]) == sorted(domains)

    first = await plausible_get(client, "sites", limit=1)
    second = await plausible_get(client, "sites", limit=1, after=first["meta"]["after"])
    assert first["meta"]["after"] == "1" and second["meta"]["after"] is None
    assert [s["domain"] for s in first["sites"] + second["sites"]] == domains
    assert await plausible_get(client, f"sites/{plausible_mcp.site.domain}") == {
        "domain": plausible_mcp.site.domain, "timezone": "UTC", "custom_properties": []}


async def test_a_key_lists_and_reads_no_other_workspaces_sites(plausible_mcp, client, make_key, database_url):
    _, elsewhere = await register_site(database_url, "another-workspace")
    assert await plausible_get(client, f"sites/{elsewhere}", 404) == {
        "error": "site not found: name a site of this key's workspace by its domain"}
    assert elsewhere not in [s["domain"] for s in (await plausible_get(client, "sites"))["sites"]]
    resp = await client.get("/api/v1/sites", headers=bearer(await make_key("write")))
    assert (resp.status, await resp.json()) == (403, {"error": "this key lacks the 'read' scope"})
