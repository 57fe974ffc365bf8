"""A site's time zone: set when the site is made or with PATCH /api/sites/{id}, listed with the site, and the
zone of its dashboard's days (windows of 30 and 90 days, daily buckets, their labels and the comparison)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.appkeys import ANALYTICS, MIRROR
from app.time_zones import ZONES
from app.views.analytics_params import window_for
from storage import analytics as store
from storage import analytics_lists
from storage.ids import new_id
from tests.analytics_support import create_site, insert_events, iso
from tests.conftest import connect
from tests.site_helpers import register_site, unique_domain
from tests.test_analytics import get

NEW_YORK = "America/New_York"  # UTC-4 in summer, UTC-5 in winter; its 2026 summer time ended on 1 November


def local(day: date, hour: int, minute: int, zone: str = NEW_YORK) -> datetime:
    return datetime.combine(day, time(hour, minute), ZoneInfo(zone)).astimezone(UTC)


def midnight(day: date, zone: str = NEW_YORK) -> datetime:
    return local(day, 0, 0, zone)


async def site_with_pageviews(database_url: str, workspace: str, stamps: list[datetime],
                              zone: str | None = None) -> str:
    """A site of the workspace with one pageview by its own visitor at each time, in `zone` if given."""
    conn = await connect(database_url)
    try:
        site_id, _, workspace_id = await create_site(conn, workspace)
        if zone is not None:
            await conn.execute("UPDATE sites SET time_zone = $2 WHERE id = $1", site_id, zone)
        await insert_events(conn, site_id, workspace_id, [
            (new_id("evt"), "pageview", f"/p{i}", "", "US", f"v{i}-{site_id}", f"s{i}-{site_id}", ts, None)
            for i, ts in enumerate(stamps)])
    finally:
        await conn.close()
    return site_id


async def analytics(client, route: str, **params) -> dict:
    status, body = await get(client, route, **params)
    assert status == 200, body
    return body


# --- the setting ------------------------------------------------------------------------------------------

async def test_a_site_is_made_in_the_time_zone_asked_for_and_lists_it(client, login):
    await login()
    berlin, plain, form = unique_domain(), unique_domain(), unique_domain()
    resp = await client.post("/api/sites", json={"domain": berlin, "timezone": "Europe/Berlin"})
    assert resp.status == 200 and (await resp.json())["timezone"] == "Europe/Berlin"
    resp = await client.post("/api/sites", json={"domain": plain})
    assert (await resp.json())["timezone"] == "UTC"
    resp = await client.post("/api/sites", data={"domain": form, "timezone": "Asia/Kolkata"})
    assert (await resp.json())["timezone"] == "Asia/Kolkata"
    # Asked again, the same site, unchanged: its zone changes with PATCH
    resp = await client.post("/api/sites", json={"domain": berlin, "timezone": "Asia/Tokyo"})
    assert (await resp.json())["timezone"] == "Europe/Berlin"
    listed = {s["domain"]: s["timezone"] for s in await (await client.get("/api/sites")).json()}
    assert listed == {berlin: "Europe/Berlin", plain: "UTC", form: "Asia/Kolkata"}


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "europe/berlin", "localtime", "+02:00", 2, ["UTC"]])
async def test_a_site_asked_for_in_an_unknown_time_zone_is_a_400_and_not_made(client, login, zone):
    await login()
    resp = await client.post("/api/sites", json={"domain": unique_domain(), "timezone": zone})
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid timezone"
    assert await (await client.get("/api/sites")).json() == []


async def test_patch_changes_a_sites_time_zone(client, login):
    await login()
    site = await (await client.post("/api/sites", json={"domain": unique_domain()})).json()
    resp = await client.patch(f"/api/sites/{site['id']}", json={"timezone": NEW_YORK})
    assert resp.status == 200
    body = await resp.json()
    assert body["id"] == site["id"] and body["timezone"] == NEW_YORK and body["status"] == "pending"
    assert [s["timezone"] for s in await (await client.get("/api/sites")).json()] == [NEW_YORK]


@pytest.mark.parametrize(("payload", "issues"), [
    ({"timezone": "Nowhere/Town"}, [{"field": "timezone", "message": "must be an IANA time zone name, such as "
                                                                     "Europe/Berlin"}]),
    ({"timezone": None}, [{"field": "timezone", "message": "must be an IANA time zone name, such as "
                                                           "Europe/Berlin"}]),
    ({}, [{"field": "timezone", "message": "required"}]),
    ({"timezone": "UTC", "domain": "other.example"}, [{"field": "domain", "message": "unknown field"}]),
    (["UTC"], [{"field": "", "message": "expected a JSON object"}]),
])
async def test_a_patch_that_names_no_time_zone_is_a_400_and_changes_nothing(client, login, payload, issues):
    await login()
    site = await (await client.post("/api/sites", json={"domain": unique_domain(), "timezone": "Asia/Tokyo"})).json()
    resp = await client.patch(f"/api/sites/{site['id']}", json=payload)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload", "issues": issues}
    assert [s["timezone"] for s in await (await client.get("/api/sites")).json()] == ["Asia/Tokyo"]


async def test_a_patch_from_another_origin_is_refused_and_changes_nothing(client, login):
    """A page elsewhere cannot move a signed-in owner's days (the dashboard's writes are same-origin only)."""
    await login()
    site = await (await client.post("/api/sites", json={"domain": unique_domain()})).json()
    resp = await client.patch(f"/api/sites/{site['id']}", json={"timezone": NEW_YORK},
                              headers={"Origin": "https://elsewhere.example"})
    assert resp.status == 403
    assert [s["timezone"] for s in await (await client.get("/api/sites")).json()] == ["UTC"]


async def test_a_patch_of_another_workspaces_site_is_a_404_and_changes_nothing(client, login, database_url):
    await login()
    other, _ = await register_site(database_url, "another-workspace")
    resp = await client.patch(f"/api/sites/{other}", json={"timezone": NEW_YORK})
    assert resp.status == 404
    conn = await connect(database_url)
    try:
        assert await conn.fetchval("SELECT time_zone FROM sites WHERE id = $1", other) == "UTC"
    finally:
        await conn.close()


async def test_every_time_zone_a_site_may_have_is_known_to_the_analytics_store(client):
    """The store buckets by the zone's name: one it did not know would fail every read of the site."""
    known = {row[0] for row in await client.app[ANALYTICS].query("SELECT time_zone FROM system.time_zones")}
    assert len(ZONES) > 400
    assert ZONES <= known


# --- the site's days --------------------------------------------------------------------------------------

async def test_a_sites_days_begin_at_its_midnight(client, login, database_url, workspace):
    """Two pageviews half an hour either side of New York's midnight: one on each of its days, while in UTC
    both fall on the later day."""
    await login()
    day = datetime.now(ZoneInfo(NEW_YORK)).date() - timedelta(days=3)
    stamps = [local(day, 23, 30), local(day + timedelta(days=1), 0, 30)]
    in_new_york = await site_with_pageviews(database_url, workspace, stamps, NEW_YORK)
    in_utc = await site_with_pageviews(database_url, workspace, stamps)
    later = (day + timedelta(days=1)).strftime("%b %d")

    for route, params in (("overview", {"range": "30d"}), ("timeseries", {"range": "7d", "interval": "day"})):
        body = await analytics(client, route, siteId=in_new_york, **params)
        points = body["timeSeries"] if route == "overview" else body["data"]
        by_label = {p["label"]: p["value"] for p in points}
        assert by_label[day.strftime("%b %d")] == 1 and by_label[later] == 1
        assert body["timezone"] == NEW_YORK
        # every point starts at a New York midnight, the last one today's
        starts = [datetime.fromisoformat(p["timestamp"]) for p in points]
        assert all(s.astimezone(ZoneInfo(NEW_YORK)).time() == time() for s in starts)
        assert starts[-1] == midnight(datetime.now(ZoneInfo(NEW_YORK)).date())
        # 30 days; 168 hours touch 8 of the site's days, or 7 when they begin at a midnight
        assert len(points) == 30 if route == "overview" else len(points) in (7, 8)

        body = await analytics(client, route, siteId=in_utc, **params)
        points = body["timeSeries"] if route == "overview" else body["data"]
        by_label = {p["label"]: p["value"] for p in points}
        assert by_label[day.strftime("%b %d")] == 0 and by_label[later] == 2
        assert body["timezone"] == "UTC"


async def test_hours_of_a_site_half_an_hour_from_utc_are_its_own(client, login, database_url, workspace):
    """Kolkata is UTC+5:30: its hours begin at half past UTC ones, and a 24-hour window starts on one."""
    await login()
    kolkata = ZoneInfo("Asia/Kolkata")
    hour = datetime.now(kolkata).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    stamps = [(hour + timedelta(minutes=m)).astimezone(UTC) for m in (5, 55)]  # one local hour, two UTC ones
    site_id = await site_with_pageviews(database_url, workspace, stamps, "Asia/Kolkata")
    body = await analytics(client, "timeseries", siteId=site_id, range="24h")
    by_start = {datetime.fromisoformat(p["timestamp"]): p for p in body["data"]}
    assert len(by_start) == 24
    assert by_start[hour.astimezone(UTC)]["value"] == 2
    assert by_start[hour.astimezone(UTC)]["label"] == hour.strftime("%b %d %H:00")
    assert sum(p["value"] for p in body["data"]) == 2


async def test_the_30_day_window_runs_from_the_sites_midnight(client, login, database_url, workspace):
    """A pageview the evening before New York's first day of the window is out of it, though it falls inside
    the UTC days of the same range; the comparison's window ends where this one begins, at a local midnight."""
    await login()
    today = datetime.now(ZoneInfo(NEW_YORK)).date()
    first = today - timedelta(days=29)
    site_id = await site_with_pageviews(database_url, workspace,
                                        [local(first - timedelta(days=1), 23, 30), local(first, 0, 30)], NEW_YORK)
    body = await analytics(client, "overview", siteId=site_id, range="30d", compare="previous_period")
    assert body["totalPageviews"] == 1 and body["uniqueVisitors"] == 1
    assert body["comparison"]["totalPageviews"] == 1
    assert body["comparison"]["to"] == iso(midnight(first))
    assert body["comparison"]["from"] == iso(midnight(first - timedelta(days=30)))
    events = await analytics(client, "events", siteId=site_id, range="30d")
    assert [e["path"] for e in events["events"]] == ["/p1"]


def test_a_window_of_days_follows_the_zones_calendar_across_a_daylight_saving_change():
    """New York's 30 days up to 15 November 2026 hold 1 November, a day of 25 hours: the window is 30
    calendar days from one local midnight to another, and its series has one point per day."""
    w = window_for("30d", datetime(2026, 11, 15, 12, tzinfo=UTC), NEW_YORK)
    assert (w.start, w.end) == (datetime(2026, 10, 17, 4, tzinfo=UTC), datetime(2026, 11, 16, 5, tzinfo=UTC))
    first, last = w.buckets("day")
    points = analytics_lists.filled({}, interval="day", first=first, last=last, time_zone=NEW_YORK)
    assert [p.astimezone(ZoneInfo(NEW_YORK)).date() for p, _ in points] == [
        date(2026, 10, 17) + timedelta(days=i) for i in range(30)]
    assert all(p.astimezone(ZoneInfo(NEW_YORK)).time() == time() for p, _ in points)


async def test_the_stores_days_match_the_series_across_a_daylight_saving_change(client, database_url, workspace):
    """The store's local days (ClickHouse's toStartOfDay in the zone) are the series' points on both sides of
    New York's change of 1 November 2026: each pageview half an hour after a midnight or before the next is
    counted on its own day."""
    days = [date(2026, 10, 31), date(2026, 11, 1), date(2026, 11, 2)]
    stamps = [t for d in days for t in (local(d, 0, 30), local(d, 23, 30))]
    site_id = await site_with_pageviews(database_url, workspace, stamps, NEW_YORK)
    await client.app[MIRROR].catch_up()
    start, end = midnight(days[0]), midnight(days[-1] + timedelta(days=1))
    points = await analytics_lists.series(client.app[ANALYTICS], site_id, start, end, name="pageview", interval="day",
                                          first=start, last=midnight(days[-1]), filters=store.Filters(),
                                          time_zone=NEW_YORK)
    assert points == [(midnight(d), 2) for d in days]
    assert end - start == timedelta(hours=73)  # one of the days lasted 25 hours
