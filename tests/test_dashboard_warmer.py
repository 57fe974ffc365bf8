"""The dashboard warmer (app/dashboard_warmer.py): unfiltered dashboard reads are remembered, and once a day,
after midnight, the day rows and cached states they need are made before anyone asks for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.appkeys import ANALYTICS, WARMER
from tests.analytics_support import add_signup_goal, load_fixture
from tests.test_analytics_days import cached_windows, computations, window_key_runs


async def test_unfiltered_reads_are_remembered_and_their_rows_made_after_midnight(client, database_url, workspace,
                                                                                  login):
    await login()
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
    # A new day: none of the rows its first reads need is there yet.
    db = client.app[ANALYTICS]
    for table in ("site_window_keys", "site_window_visitors", "site_day_counts"):
        await db.delete_where(table, "site_id = {s:String}", {"s": site.site_id})
    assert (await computations(db, site.site_id), await cached_windows(db, site.site_id),
            await window_key_runs(db, site.site_id)) == (0, 0, {})
    warmer.warmed -= timedelta(days=1)
    assert await warmer.warm(noon.replace(hour=0, minute=0, second=30)) == 0  # too soon after midnight
    assert await warmer.warm(noon) == 3
    made = (await computations(db, site.site_id), await cached_windows(db, site.site_id),
            await window_key_runs(db, site.site_id))
    assert made[0] > 0 and made[1] == 1
    assert sorted(made[2].values()) == [1, 1] and "page" in made[2]  # the page's states and the goals'
    # The morning's reads find them made, and answer as before.
    for (route, params), before in zip(reads, answers, strict=False):
        resp = await client.get(f"/api/analytics/{route}", params=params)
        assert (resp.status, await resp.json()) == (200, before)
    assert (await computations(db, site.site_id), await cached_windows(db, site.site_id),
            await window_key_runs(db, site.site_id)) == made
    assert await warmer.warm(noon) == 0  # once a day
