"""GET /api/analytics/overview, /timeseries and /top-*: numbers worked out by hand from
tests/analytics_support.py (events 1-9, sessions s1-s5)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tests.analytics_support import iso, load_fixture, truncate


@pytest.fixture
async def site(client, database_url, workspace, login):
    await login()
    return await load_fixture(database_url, workspace)


async def get(client, route: str, /, **params):
    resp = await client.get(f"/api/analytics/{route}", params=params)
    return resp.status, await resp.json()


def rows(*pairs) -> list[dict]:
    return [{"key": k, "count": c, "percentage": p} for k, c, p in pairs]


# range -> (totalEvents, totalPageviews, uniqueVisitors, bounceRate, avgSessionDuration)
TOTALS = {
    "1h": (1, 1, 1, 100.0, 0),
    "24h": (6, 4, 3, 66.67, 50_000),
    "7d": (8, 6, 4, 50.0, 52_500),
    "30d": (8, 6, 4, 50.0, 52_500),
    "90d": (9, 7, 5, 60.0, 42_000),
}


@pytest.mark.parametrize("range_name", list(TOTALS))
async def test_overview_totals_per_range(client, site, range_name):
    status, body = await get(client, "overview", siteId=site.site_id, range=range_name)
    assert status == 200
    got = (body["totalEvents"], body["totalPageviews"], body["uniqueVisitors"], body["bounceRate"],
           body["avgSessionDuration"])
    assert got == TOTALS[range_name]


async def test_overview_default_range_is_7d_with_top_lists(client, site):
    status, body = await get(client, "overview", siteId=site.site_id)
    assert status == 200
    assert body["totalEvents"] == 8 and body["range"] == "7d"
    assert body["topPages"] == rows(("/", 3, 50.0), ("/blog/a", 1, 16.67), ("/live", 1, 16.67),
                                    ("/pricing", 1, 16.67))
    # www. stripped, internal navigation (a subdomain of the site) and empty referrers excluded
    assert body["topReferrers"] == rows(("google.com", 2, 66.67), ("news.ycombinator.com", 1, 33.33))
    assert body["topCountries"] == rows(("US", 4, 66.67), ("DE", 1, 16.67), ("FR", 1, 16.67))
    assert len(body["timeSeries"]) == 168
    assert sum(p["value"] for p in body["timeSeries"]) == 6


async def test_overview_90d_top_lists(client, site):
    _, body = await get(client, "overview", siteId=site.site_id, range="90d")
    assert body["topPages"] == rows(("/", 3, 42.86), ("/blog/a", 1, 14.29), ("/live", 1, 14.29),
                                    ("/old", 1, 14.29), ("/pricing", 1, 14.29))
    assert body["topCountries"] == rows(("US", 4, 57.14), ("DE", 2, 28.57), ("FR", 1, 14.29))
    assert len(body["timeSeries"]) == 90


@pytest.mark.parametrize(("params", "expected"), [
    ({"country": "DE"}, (1, 1, 1, 100.0, 30_000)),
    ({"country": "de"}, (1, 1, 1, 100.0, 30_000)),
    ({"path": "PRICING"}, (2, 1, 1, 0.0, 120_000)),
    # The page key, not the stored path: "/pricing?utm=1" is the page "/pricing" (docs/decisions.md).
    ({"path": "utm=1"}, (0, 0, 0, 0.0, 0)),
    ({"path": "/pricing?utm"}, (0, 0, 0, 0.0, 0)),
    ({"referrer": "google"}, (2, 2, 2, 0.0, 90_000)),
    ({"eventName": "signup"}, (1, 0, 1, 0.0, 120_000)),
    ({"eventName": "pageview", "country": "US"}, (4, 4, 3, 33.33, 60_000)),
    ({"country": "JP"}, (0, 0, 0, 0.0, 0)),
])
async def test_overview_filters(client, site, params, expected):
    status, body = await get(client, "overview", siteId=site.site_id, range="7d", **params)
    assert status == 200
    got = (body["totalEvents"], body["totalPageviews"], body["uniqueVisitors"], body["bounceRate"],
           body["avgSessionDuration"])
    assert got == expected


async def test_overview_filter_narrows_top_lists_and_series(client, site):
    _, body = await get(client, "overview", siteId=site.site_id, range="7d", country="DE")
    assert body["topPages"] == rows(("/", 1, 100.0))
    assert body["topReferrers"] == rows(("news.ycombinator.com", 1, 100.0))
    assert body["topCountries"] == rows(("DE", 1, 100.0))
    assert sum(p["value"] for p in body["timeSeries"]) == 1
    _, body = await get(client, "overview", siteId=site.site_id, range="7d", eventName="signup")
    assert body["topPages"] == rows(("/pricing", 1, 100.0))


def expected_series(site, keys, start: datetime, unit: str) -> Counter:
    return Counter(truncate(site.ts[k], unit) for k in keys if site.ts[k] >= start)


# range -> (points, unit, pageview keys possibly inside)
SERIES = {
    "1h": (60, "minute", [9]),
    "24h": (24, "hour", [1, 2, 3, 9]),
    "7d": (168, "hour", [1, 2, 3, 5, 6, 9]),
    "30d": (30, "day", [1, 2, 3, 5, 6, 9]),
    "90d": (90, "day", [1, 2, 3, 5, 6, 7, 9]),
}
STEP = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


@pytest.mark.parametrize("range_name", list(SERIES))
async def test_timeseries_default_interval_aligned_with_zero_buckets(client, site, range_name):
    points, unit, keys = SERIES[range_name]
    status, body = await get(client, "timeseries", siteId=site.site_id, range=range_name)
    assert status == 200
    data = body["data"]
    assert len(data) == points
    stamps = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")) for p in data]
    assert all(truncate(s, unit) == s for s in stamps)  # aligned to the bucket, UTC
    assert all(b - a == STEP[unit] for a, b in itertools.pairwise(stamps))
    assert stamps[-1] == truncate(datetime.now(UTC), unit) or stamps[-1] == truncate(site.now, unit)
    expected = expected_series(site, keys, stamps[0], unit)
    assert {s: p["value"] for s, p in zip(stamps, data, strict=True) if p["value"]} == dict(expected)
    assert sum(expected.values()) == len(keys)
    assert sum(1 for p in data if p["value"] == 0) == points - len(expected)
    assert all(p["label"] for p in data)


async def test_timeseries_custom_event_and_explicit_interval(client, site):
    _, body = await get(client, "timeseries", siteId=site.site_id, range="24h", eventName="signup")
    hits = [p for p in body["data"] if p["value"]]
    assert hits == [{"timestamp": iso(truncate(site.ts[4], "hour")), "value": 1,
                     "label": truncate(site.ts[4], "hour").strftime("%b %d %H:00")}]
    _, body = await get(client, "timeseries", siteId=site.site_id, range="7d", interval="day")
    stamps = [p["timestamp"] for p in body["data"]]
    assert all(s.endswith("T00:00:00.000Z") for s in stamps) and len(stamps) in (7, 8)
    assert sum(p["value"] for p in body["data"]) == 6
    _, body = await get(client, "timeseries", siteId=site.site_id, range="24h", interval="minute")
    assert 23 * 60 + 1 <= len(body["data"]) <= 24 * 60  # from the first hour's start to the current minute
    assert sum(p["value"] for p in body["data"]) == 4
    _, body = await get(client, "timeseries", siteId=site.site_id, range="90d", interval="hour")
    assert sum(p["value"] for p in body["data"]) == 7


async def test_timeseries_rejects_bad_interval(client, site):
    for interval in ("week", "second"):
        status, body = await get(client, "timeseries", siteId=site.site_id, interval=interval)
        assert status == 400 and body["error"] == "invalid interval"
    status, body = await get(client, "timeseries", siteId=site.site_id, range="7d", interval="minute")
    assert status == 400 and body["error"] == "interval too fine for range"


async def test_top_pages(client, site):
    status, body = await get(client, "top-pages", siteId=site.site_id)
    assert status == 200
    assert body == {"data": rows(("/", 3, 50.0), ("/blog/a", 1, 16.67), ("/live", 1, 16.67),
                                 ("/pricing", 1, 16.67)), "total": 6}
    _, body = await get(client, "top-pages", siteId=site.site_id, limit="2")
    assert body == {"data": rows(("/", 3, 50.0), ("/blog/a", 1, 16.67)), "total": 6}
    _, body = await get(client, "top-pages", siteId=site.site_id, eventName="outbound", range="24h")
    assert body == {"data": rows(("/", 1, 100.0)), "total": 1}
    _, body = await get(client, "top-pages", siteId=site.site_id, range="1h")
    assert body == {"data": rows(("/live", 1, 100.0)), "total": 1}


async def test_top_referrers_and_countries(client, site):
    _, body = await get(client, "top-referrers", siteId=site.site_id, range="24h")
    assert body == {"data": rows(("google.com", 1, 50.0), ("news.ycombinator.com", 1, 50.0)), "total": 2}
    _, body = await get(client, "top-referrers", siteId=site.site_id, range="1h")
    assert body == {"data": [], "total": 0}
    _, body = await get(client, "top-countries", siteId=site.site_id, range="24h")
    assert body == {"data": rows(("US", 3, 75.0), ("DE", 1, 25.0)), "total": 4}
    _, body = await get(client, "top-countries", siteId=site.site_id, range="90d", limit="1")
    assert body == {"data": rows(("US", 4, 57.14)), "total": 7}


async def test_top_limit_validation_and_clamp(client, site):
    for bad in ("0", "-1", "x"):
        status, body = await get(client, "top-pages", siteId=site.site_id, limit=bad)
        assert status == 400 and body == {"error": "invalid limit"}
    status, body = await get(client, "top-pages", siteId=site.site_id, limit="100000")
    assert status == 200 and body["total"] == 6


async def test_top_lists_page_with_offset(client, site):
    """The spec's `offset` pages the list-style endpoints, top lists included: it was ignored, so asking for
    the rows after the first two gave the first two again. `total` stays the whole list's."""
    _, body = await get(client, "top-pages", siteId=site.site_id, limit="2", offset="2")
    assert body == {"data": rows(("/live", 1, 16.67), ("/pricing", 1, 16.67)), "total": 6}
    _, body = await get(client, "top-countries", siteId=site.site_id, range="90d", offset="1")
    assert body == {"data": rows(("DE", 2, 28.57), ("FR", 1, 14.29)), "total": 7}
    _, body = await get(client, "top-referrers", siteId=site.site_id, range="24h", offset="5")
    assert body == {"data": [], "total": 2}  # past the end: no rows, the total as before
    for bad in ("-1", "x"):
        status, body = await get(client, "top-pages", siteId=site.site_id, offset=bad)
        assert status == 400 and body == {"error": "invalid offset"}
