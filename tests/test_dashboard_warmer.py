"""The dashboard warmer (app/dashboard_warmer.py): unfiltered dashboard reads are remembered, and once a day,
after midnight, the day rows and cached states they need are made before anyone asks for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from app.appkeys import ANALYTICS, WARMER
from tests.analytics_support import add_signup_goal, load_fixture
from tests.test_analytics_days import cached_windows, computations, window_key_runs


async def forget_warmings(database_url: str) -> None:
    """Earlier tests' apps stored their reads, and may have claimed a day: start from none."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM dashboard_reads; DELETE FROM dashboard_warmings")
    finally:
        await conn.close()


async def made_rows(db, site_id: str) -> tuple:
    return (await computations(db, site_id), await cached_windows(db, site_id), await window_key_runs(db, site_id))


async def forget_rows(db, site_id: str) -> None:
    """What a new day finds: none of the rows its first reads need."""
    for table in ("site_window_keys", "site_window_visitors", "site_day_counts"):
        await db.delete_where(table, "site_id = {s:String}", {"s": site_id})
    assert await made_rows(db, site_id) == (0, 0, {})


async def test_unfiltered_reads_are_remembered_and_their_rows_made_after_midnight(client, database_url, workspace,
                                                                                  login):
    await login()
    await forget_warmings(database_url)
    site = await load_fixture(database_url, workspace)
    await add_signup_goal(database_url, site.site_id)
    month = [("siteId", site.site_id), ("range", "30d")]
    reads = [("overview", month), ("breakdown", [*month, ("property", "page")]),
             ("breakdown", [*month, ("property", "goal"), ("metrics", "visitors,events,conversion_rate")])]
    not_kept = [("breakdown", [*month, ("property", "page"), ("filter", "country==DE")]),  # filtered
                ("breakdown", [*month, ("property", "country"), ("metrics", "visitors,visits")]),  # visits
                ("breakdown", [*month, ("property", "entry_page")])]  # a visit dimension
    answers = []
    for route, params in reads + not_kept:
        resp = await client.get(f"/api/analytics/{route}", params=params)
        assert resp.status == 200
        answers.append(await resp.json())
    warmer = client.app[WARMER]
    assert sorted(warmer.remembered) == sorted([(site.site_id, "30d", ""), (site.site_id, "30d", "page"),
                                                (site.site_id, "30d", "goal")])
    noon = datetime.now(UTC).replace(hour=12)
    assert await warmer.warm(noon) == 0  # the day it started: today's reads made today's rows
    db = client.app[ANALYTICS]
    await forget_rows(db, site.site_id)
    warmer.warmed -= timedelta(days=1)
    assert await warmer.warm(noon.replace(hour=0, minute=0, second=30)) == 0  # too soon after midnight
    assert await warmer.warm(noon) == 3
    made = await made_rows(db, site.site_id)
    assert made[0] > 0 and made[1] == 1
    assert sorted(made[2].values()) == [1, 1] and "page:pageviews" in made[2]  # the page's states and the goals'
    # The morning's reads find them made, and answer as before.
    for (route, params), before in zip(reads, answers, strict=False):
        resp = await client.get(f"/api/analytics/{route}", params=params)
        assert (resp.status, await resp.json()) == (200, before)
    assert await made_rows(db, site.site_id) == made
    assert await warmer.warm(noon) == 0  # once a day


async def test_reads_outlive_a_restart_and_one_process_warms_a_day(client, make_client, settings, database_url,
                                                                    workspace, login):
    await login()
    await forget_warmings(database_url)
    site = await load_fixture(database_url, workspace)
    month = [("siteId", site.site_id), ("range", "30d")]
    reads = [("overview", month), ("breakdown", [*month, ("property", "country")])]
    answers = []
    for route, params in reads:
        resp = await client.get(f"/api/analytics/{route}", params=params)
        assert resp.status == 200
        answers.append(await resp.json())
    assert len(client.app[WARMER].remembered) == 2
    await client.close()  # a restart: the stopping process stores the reads it noted
    restarted = await make_client(settings)
    warmer = restarted.app[WARMER]
    assert warmer.remembered == []
    db = restarted.app[ANALYTICS]
    await forget_rows(db, site.site_id)
    noon = datetime.now(UTC).replace(hour=12)
    warmer.warmed -= timedelta(days=1)
    assert await warmer.warm(noon) == 2
    made = await made_rows(db, site.site_id)
    assert made[0] > 0 and made[1] == 1 and list(made[2]) == ["country"]
    # A second process finds the day claimed: it makes nothing again.
    other = await make_client(settings)
    other.app[WARMER].warmed -= timedelta(days=1)
    assert await other.app[WARMER].warm(noon) == 0
    assert await made_rows(db, site.site_id) == made
    await login(the_client=restarted)
    for (route, params), before in zip(reads, answers, strict=True):
        resp = await restarted.get(f"/api/analytics/{route}", params=params)
        assert (resp.status, await resp.json()) == (200, before)
    assert await made_rows(db, site.site_id) == made


async def test_a_nights_warming_stops_at_its_budget(client, database_url, workspace, login):
    """A night's warming ends once its time is spent, after at least one read (the first in its order: the most
    recently asked); the reads left make their rows when first asked for."""
    await login()
    await forget_warmings(database_url)
    site = await load_fixture(database_url, workspace)
    month = [("siteId", site.site_id), ("range", "30d")]
    for route, params in (("overview", month), ("breakdown", [*month, ("property", "country")])):
        assert (await client.get(f"/api/analytics/{route}", params=params)).status == 200
    warmer, db = client.app[WARMER], client.app[ANALYTICS]
    await forget_rows(db, site.site_id)
    warmer.warmed -= timedelta(days=1)
    warmer.budget = timedelta(0)
    assert await warmer.warm(datetime.now(UTC).replace(hour=12)) == 1
    made = await made_rows(db, site.site_id)
    # The overview's rows (first of the day's reads), not the country's.
    assert made[0] > 0 and made[1] == 1 and made[2] == {}


async def test_a_site_in_another_zone_has_its_periods_warmed(client, database_url, workspace, login):
    """The night's warming takes the calendar periods as it takes the named ranges (their windows are the
    site's days): this month's, last month's, the last 12 months' and all time's overviews of a New York site
    are warmed (all time's since the site's first event, 40 days ago), and read the same afterwards, making
    nothing more."""
    await login()
    await forget_warmings(database_url)
    site = await load_fixture(database_url, workspace)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE sites SET time_zone = 'America/New_York' WHERE id = $1", site.site_id)
    finally:
        await conn.close()
    answers = {}
    periods = ("month", "last_month", "12mo", "all")
    for period in periods:
        resp = await client.get("/api/analytics/overview", params={"siteId": site.site_id, "range": period})
        assert resp.status == 200
        answers[period] = await resp.json()
    warmer = client.app[WARMER]
    assert sorted(warmer.remembered) == sorted((site.site_id, period, "") for period in periods)
    db = client.app[ANALYTICS]
    await forget_rows(db, site.site_id)
    warmer.warmed -= timedelta(days=1)
    assert await warmer.warm(datetime.now(UTC).replace(hour=12)) == len(periods)
    warmed = await made_rows(db, site.site_id)
    for period, before in answers.items():
        resp = await client.get("/api/analytics/overview", params={"siteId": site.site_id, "range": period})
        assert (resp.status, await resp.json()) == (200, before)
    assert await made_rows(db, site.site_id) == warmed
