"""range=custom&from&to: the site's days from one date to another, both included, as Plausible's custom period:
by the day, or by the hour for one day; on every read (overview, series, breakdowns, the event log and the
export), compared with the days before it, and refused clearly when its days are not days. And the calendar
periods (today, yesterday, this month, last month, this year, the last 12 months, all time), which are windows
of the site's days the same way."""

from __future__ import annotations

import secrets
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.appkeys import WARMER
from app.views.analytics_params import window_for
from tests.analytics_support import iso
from tests.test_analytics import get
from tests.test_site_time_zones import NEW_YORK, local, midnight, site_with_pageviews


@pytest.fixture
async def site(client, login, database_url, workspace):
    """A New York site with a pageview half an hour inside each end of the days [today-10, today-5] and one
    half an hour outside each: (site id, first day, last day)."""
    await login()
    today = datetime.now(ZoneInfo(NEW_YORK)).date()
    first, last = today - timedelta(days=10), today - timedelta(days=5)
    site_id = await site_with_pageviews(database_url, workspace, [
        local(first - timedelta(days=1), 23, 30), local(first, 0, 30), local(last, 23, 30),
        local(last + timedelta(days=1), 0, 30)], NEW_YORK)
    return site_id, first, last


async def test_a_custom_range_is_the_sites_days_from_one_date_to_another(client, site):
    site_id, first, last = site
    days_asked = {"from": first.isoformat(), "to": last.isoformat()}
    status, body = await get(client, "overview", siteId=site_id, range="custom", **days_asked)
    assert status == 200
    assert body["totalPageviews"] == 2 and body["uniqueVisitors"] == 2
    assert (body["range"], body["interval"], body["from"], body["to"]) == ("custom", "day", first.isoformat(),
                                                                         last.isoformat())
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    assert [p["timestamp"] for p in body["timeSeries"]] == [
        iso(midnight(d)) for d in days]
    assert [p["value"] for p in body["timeSeries"]] == [1, 0, 0, 0, 0, 1]
    assert body["timeSeries"][0]["label"] == first.strftime("%b %d")

    # the same days on every read
    status, series = await get(client, "timeseries", siteId=site_id, range="custom", interval="day", **days_asked)
    assert status == 200 and [p["value"] for p in series["data"]] == [1, 0, 0, 0, 0, 1]
    status, pages = await get(client, "breakdown", siteId=site_id, range="custom", property="page", **days_asked)
    assert status == 200 and sorted(r["key"] for r in pages["data"]) == ["/p1", "/p2"]
    status, log = await get(client, "events", siteId=site_id, range="custom", **days_asked)
    assert status == 200 and [e["path"] for e in log["events"]] == ["/p2", "/p1"]
    resp = await client.get("/api/analytics/export", params={"siteId": site_id, "range": "custom", **days_asked})
    assert resp.status == 200
    assert resp.headers["Content-Disposition"] == (
        f'attachment; filename="tally-{site_id}-{first.isoformat()}_{last.isoformat()}.csv"')
    assert len((await resp.text()).strip().splitlines()) == 3  # the header and two events
    # A custom range is not one the night's warming makes rows for (it makes the named ranges')
    assert all(r != "custom" for _, r, _ in client.app[WARMER].remembered)


async def test_one_day_is_read_by_the_hour_and_compared_with_the_day_before(client, site):
    site_id, first, _ = site
    status, body = await get(client, "overview", siteId=site_id, range="custom", compare="previous_period",
                              **{"from": first.isoformat(), "to": first.isoformat()})
    assert status == 200
    assert body["interval"] == "hour" and body["totalPageviews"] == 1
    assert len(body["timeSeries"]) == (midnight(first + timedelta(days=1)) - midnight(first)) // timedelta(hours=1)
    assert body["timeSeries"][0]["value"] == 1 and body["timeSeries"][0]["label"] == first.strftime("%b %d 00:00")
    assert body["comparison"]["totalPageviews"] == 1  # the evening before
    assert (body["comparison"]["from"], body["comparison"]["to"]) == (
        iso(midnight(first - timedelta(days=1))), iso(midnight(first)))


@pytest.mark.parametrize(("params", "error"), [
    ({}, "invalid from"),
    ({"from": "2026-11-01"}, "invalid to"),
    ({"from": "2026-11-1", "to": "2026-11-02"}, "invalid from"),
    ({"from": "20261101", "to": "2026-11-02"}, "invalid from"),
    ({"from": "2026-11-01", "to": "2026-02-30"}, "invalid to"),
    ({"from": "1999-12-31", "to": "2026-11-02"}, "invalid from"),
    ({"from": "2026-11-02", "to": "2026-11-01"}, "invalid range"),
    ({"from": "2020-01-01", "to": "2026-11-01"}, "invalid range"),  # past 2,200 days
])
async def test_a_custom_range_without_its_days_is_a_400(client, site, params, error):
    site_id, _, _ = site
    status, body = await get(client, "overview", siteId=site_id, range="custom", **params)
    assert status == 400 and body["error"] == error


async def test_an_unknown_range_names_the_periods_and_custom_among_those_allowed(client, site):
    status, body = await get(client, "overview", siteId=site[0], range="6mo")
    assert status == 400
    assert body["allowed"] == ["1h", "24h", "7d", "30d", "90d", "today", "yesterday", "month", "last_month", "year",
                               "12mo", "all", "custom"]


@pytest.mark.parametrize(("name", "first", "last", "unit"), [
    ("today", date(2026, 2, 28), date(2026, 2, 28), "hour"),
    ("yesterday", date(2026, 2, 27), date(2026, 2, 27), "hour"),
    ("month", date(2026, 2, 1), date(2026, 2, 28), "day"),
    ("last_month", date(2026, 1, 1), date(2026, 1, 31), "day"),
    ("year", date(2026, 1, 1), date(2026, 2, 28), "day"),
    ("12mo", date(2025, 3, 1), date(2026, 2, 28), "day"),  # Plausible's: this month and the 11 before it
])
def test_the_calendar_periods_are_the_sites_days(name, first, last, unit):
    """At 03:00 UTC on 1 March it is still 28 February in New York."""
    w = window_for(name, datetime(2026, 3, 1, 3, tzinfo=UTC), NEW_YORK)
    assert (w.start, w.end, w.unit, w.days) == (midnight(first), midnight(last + timedelta(days=1)), unit,
                                                (first, last))


async def test_this_month_and_last_month_begin_at_the_sites_first_midnight(client, login, database_url, workspace):
    """Pageviews half an hour after New York's first midnight of this month and of the last, and half an hour
    before the last's: each period counts its own, and says which days it is."""
    await login()
    today = datetime.now(ZoneInfo(NEW_YORK)).date()
    this_month = today.replace(day=1)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    site_id = await site_with_pageviews(database_url, workspace, [
        local(last_month - timedelta(days=1), 23, 30), local(last_month, 0, 30), local(this_month, 0, 30)], NEW_YORK)
    for name, first, last in (("month", this_month, today), ("last_month", last_month, this_month - timedelta(days=1))):
        status, body = await get(client, "overview", siteId=site_id, range=name)
        assert status == 200
        assert (body["totalPageviews"], body["range"], body["interval"], body["from"], body["to"]) == (
            1, name, "day", first.isoformat(), last.isoformat())
        assert len(body["timeSeries"]) == (last - first).days + 1
    status, body = await get(client, "overview", siteId=site_id, range="today")
    assert status == 200 and body["interval"] == "hour" and body["from"] == body["to"] == today.isoformat()


@pytest.mark.parametrize(("now", "first"), [
    (datetime(2026, 12, 31, 12, tzinfo=UTC), date(2026, 1, 1)),  # its 12 months are the calendar year
    (datetime(2026, 1, 15, 12, tzinfo=UTC), date(2025, 2, 1)),
])
def test_the_last_12_months_begin_on_the_first_of_the_month_11_months_before(now, first):
    w = window_for("12mo", now)
    assert w.days == (first, now.date())


def test_all_time_is_the_sites_days_since_its_first(now=datetime(2026, 3, 1, 3, tzinfo=UTC)):
    """From the site's first day (given), to today; no further back than a series of days can reach."""
    w = window_for("all", now, NEW_YORK, since=date(2025, 11, 3))
    assert (w.start, w.end, w.unit, w.days) == (midnight(date(2025, 11, 3)), midnight(date(2026, 3, 1)), "day",
                                                (date(2025, 11, 3), date(2026, 2, 28)))
    assert window_for("all", now, NEW_YORK, since=date(2019, 1, 1)).days == (date(2020, 2, 21), date(2026, 2, 28))
    assert window_for("all", now, NEW_YORK).days == (date(2026, 2, 28), date(2026, 2, 28))  # no first day known


async def test_this_year_and_all_time_count_the_sites_days(client, login, database_url, workspace):
    """A New York site made today with pageviews half an hour after this year's first midnight, half an hour
    before it, and 400 days ago (events older than the site: a restore, an import): this year counts the first,
    the last 12 months the first two (within 11 months before this one), all time all three, from its first
    event's day."""
    await login()
    today = datetime.now(ZoneInfo(NEW_YORK)).date()
    new_year = today.replace(month=1, day=1)
    oldest = today - timedelta(days=400)
    site_id = await site_with_pageviews(database_url, workspace, [
        local(new_year, 0, 30), local(new_year - timedelta(days=1), 23, 30), local(oldest, 12, 0)], NEW_YORK)
    twelve = window_for("12mo", datetime.now(UTC), NEW_YORK).days
    expected = {"year": (new_year, 1), "12mo": (twelve[0], 1 + (twelve[0] < new_year)), "all": (oldest, 3)}
    for name, (first, pageviews) in expected.items():
        status, body = await get(client, "overview", siteId=site_id, range=name)
        assert status == 200
        assert (body["totalPageviews"], body["range"], body["interval"], body["from"], body["to"]) == (
            pageviews, name, "day", first.isoformat(), today.isoformat())
        assert len(body["timeSeries"]) == (today - first).days + 1
        assert sum(p["value"] for p in body["timeSeries"]) == pageviews


async def test_all_time_of_a_site_without_events_is_from_the_day_it_was_made(client, login):
    await login()
    resp = await client.post("/api/sites", data={"domain": f"all-{secrets.token_hex(4)}.example"})
    assert resp.status == 200
    site_id = (await resp.json())["id"]
    status, body = await get(client, "overview", siteId=site_id, range="all")
    today = datetime.now(UTC).date().isoformat()
    assert status == 200 and (body["from"], body["to"], body["totalPageviews"]) == (today, today, 0)
