"""Day rows behind unfiltered overviews (site_days' visitor sets, site_day_counts' counts of ended days):
the overview read through them agrees exactly with the same numbers read from the events alone, and
stays exact when a batch is written twice, when a late event lands in a counted day, after a rebuild
since a day, after an interrupted computation, and on a store from before the tables."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from app.appkeys import ANALYTICS, MIRROR
from app.views.analytics_params import window_for
from storage import analytics as store
from storage import analytics_breakdown, analytics_lists, analytics_mirror, analytics_overview
from storage.analytics_breakdown import STATES_DIM
from storage.analytics_days import HOURS, HOURS_MARKER, MARKER, TOTAL, VISIT_HOURS_MARKER, VISITS, whole_days
from storage.clickhouse import Params
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import ROW_GRANULES, STATE_TABLES, TABLES
from storage.db import init_connection
from storage.site_filters import METRICS, Filter
from tests.analytics_support import (
    add_visits_around_end,
    create_site,
    insert_events,
    window_ending_inside_a_day,
    write_site_events_again,
)
from tests.test_analytics_engine import generated_site


async def overview(db, site_id: str, domain: str, range_name: str = "30d"):
    w = window_for(range_name)
    first, last = w.buckets(w.unit)
    return await analytics_overview.overview(db, site_id, w.start, w.end, name="pageview", interval=w.unit, first=first,
                                last=last, domain=domain, limit=5, filters=store.Filters())


async def from_events(db, site_id: str, domain: str, range_name: str = "30d"):
    """The overview's numbers by the separate reads that never use the day rows, and the series counted from
    the events here (analytics_lists.series reads the day rows too)."""
    w = window_for(range_name)
    f = store.Filters()
    tops = {dim: await analytics_lists.top(db, site_id, w.start, w.end, dim=dim, name="pageview", domain=domain,
                                           limit=5, filters=f) for dim in store.TOP_DIMENSIONS}
    return (await store.totals(db, site_id, w.start, w.end, f),
            await store.session_stats(db, site_id, w.start, w.end, f), tops,
            await series_from_events(db, site_id, range_name, w.unit))


async def series_from_events(db, site_id: str, range_name: str, interval: str) -> list:
    w = window_for(range_name)
    first, last = w.buckets(interval)
    rows = await db.query(f"SELECT toUnixTimestamp({store.bucket(Params(), interval)}) AS b, count() FROM "
                          f"{db.table('site_events')} FINAL WHERE site_id = {{s:String}} AND name = 'pageview' "
                          "AND ts >= {a:DateTime64(6, 'UTC')} AND ts < {z:DateTime64(6, 'UTC')} GROUP BY b",
                          {"s": site_id, "a": w.start, "z": w.end})
    return analytics_lists.filled(dict(rows), interval=interval, first=first, last=last)


async def series(db, site_id: str, range_name: str, interval: str) -> list:
    w = window_for(range_name)
    first, last = w.buckets(interval)
    return await analytics_lists.series(db, site_id, w.start, w.end, name="pageview", interval=interval,
                                        first=first, last=last, filters=store.Filters())


async def mirrored_site(client, database_url: str, workspace: str, **generated) -> tuple:
    """A generated site (tests/test_analytics_engine.py) whose events have reached the store: (store, site
    id, domain)."""
    site_id, domain = await generated_site(database_url, workspace, **generated)
    await client.app[MIRROR].catch_up()
    return client.app[ANALYTICS], site_id, domain


async def computations(db, site_id: str) -> int:
    return (await db.query(f"SELECT count() FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                           f"AND dim = {MARKER}", {"s": site_id}))[0][0]


async def cached_windows(db, site_id: str) -> int:
    """How many visitor states of ended days' windows the store has made for the site."""
    return (await db.query(f"SELECT count() FROM {db.table('site_window_visitors')} WHERE site_id = {{s:String}}",
                           {"s": site_id}))[0][0]


async def add_late_event(client, database_url: str, site_id: str, *, name: str = "pageview", path: str = "/late",
                         tag: str = "late", days_ago: int = 3) -> datetime:
    """An event (by default a pageview of /late) by a new visitor at noon `days_ago` days ago (an ended,
    counted day), committed and mirrored; returns its time. `tag` names its id, visitor and session."""
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        ws = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site_id)
        at = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=days_ago)
        await insert_events(conn, site_id, ws, [(f"evt_{tag}_{site_id}", name, path, "", "NZ",
                                                 f"{tag}-{site_id}", f"{tag}-{site_id}", at, None)])
    finally:
        await conn.close()
    await client.app[MIRROR].catch_up()
    return at


async def test_whole_days_of_a_window():
    day = datetime(2026, 3, 1, tzinfo=UTC)
    assert whole_days(day, day + timedelta(days=2)) == [day.date(), (day + timedelta(days=1)).date()]
    assert whole_days(day + timedelta(hours=1), day + timedelta(days=2, hours=5)) == [(day + timedelta(days=1)).date()]
    assert whole_days(day + timedelta(hours=1), day + timedelta(hours=20)) == []


async def test_unfiltered_overviews_match_the_events(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace)
    for range_name in ("7d", "30d", "90d"):
        assert await overview(db, site_id, domain, range_name) == await from_events(db, site_id, domain, range_name)
    assert await computations(db, site_id) > 0  # the ended days were counted
    assert await cached_windows(db, site_id) == 3  # and the visitors of each window's ended days merged
    before = await computations(db, site_id)
    assert await overview(db, site_id, domain) == await from_events(db, site_id, domain)
    assert await computations(db, site_id) == before  # and are read again, not counted again
    assert await cached_windows(db, site_id) == 3


async def test_reads_sent_at_once_count_each_day_and_merge_each_window_once(client, database_url, workspace):
    """The dashboard sends its reads at once: the overviews, the series and the goals' base each find the
    ended days uncounted and the window's visitors unmerged. One computation of each serves them all, and
    every answer is the one the same read gives alone afterwards."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace)
    w = window_for("30d")
    together = await asyncio.gather(overview(db, site_id, domain), overview(db, site_id, domain),
                                    series(db, site_id, "30d", "day"),
                                    analytics_overview.visitors(db, site_id, w.start, w.end))
    ended = (await db.query(f"SELECT uniqExact(day) FROM {db.table('site_days')} WHERE site_id = {{s:String}} "
                            "AND day IN {d:Array(Date)} AND day < today()",
                            {"s": site_id, "d": whole_days(w.start, w.end)}))[0][0]
    assert ended > 20
    assert await computations(db, site_id) == ended  # a marker per day: each day counted once
    assert await cached_windows(db, site_id) == 1
    alone = [await overview(db, site_id, domain), await series(db, site_id, "30d", "day"),
             await analytics_overview.visitors(db, site_id, w.start, w.end)]
    assert together == [alone[0], *alone] == [alone[0], alone[0], await series_from_events(db, site_id, "30d", "day"),
                                              alone[0][0].visitors]
    assert await computations(db, site_id) == ended


async def visitors_by(db, site_id: str, prop: str, range_name: str, metrics, limit: int = 10, offset: int = 0,
                      domain: str | None = None):
    w = window_for(range_name)
    rows = await analytics_breakdown.breakdown(db, site_id, w.start, w.end, prop=prop, filters=store.Filters(),
                                               goals=[], limit=limit, offset=offset, metrics=metrics, domain=domain)
    return [(r["key"], r["visitors"]) for r in rows]


async def window_key_runs(db, site_id: str) -> dict[str, int]:
    """Per dimension, how many computations of cached per-value visitor states the site has (their markers)."""
    return dict(await db.query(f"SELECT dim, count() FROM {db.table('site_window_keys')} WHERE site_id = {{s:String}} "
                               "AND key = '' GROUP BY dim", {"s": site_id}))


async def test_unfiltered_visitor_breakdowns_merge_cached_states_of_ended_days(client, database_url, workspace):
    """The dashboard's panels ask for the visitors of each value, unfiltered: the window's ended days come from
    per-value visitor states made once per window and dimension, and the rows are those counted from the
    events, pages of them included. The page's states count pageviews: a page that only had a custom event
    in an ended day is no row. A late event in one of the days makes the states again."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace)
    await add_late_event(client, database_url, site_id, name="video_play", path="/custom-only", tag="custom",
                         days_ago=4)
    for range_name in ("7d", "30d"):
        for prop in store.EVENT_DIMENSION_COLUMNS:  # the referrer's leave the site's own pages out: its domain
            assert await visitors_by(db, site_id, prop, range_name, {"visitors"}, domain=domain) == \
                await visitors_by(db, site_id, prop, range_name, METRICS, domain=domain), (prop, range_name)
    pages = await visitors_by(db, site_id, "page", "30d", METRICS)
    assert len(pages) > 4 and pages[0][1] > 1
    assert "/custom-only" not in dict(await visitors_by(db, site_id, "page", "30d", {"visitors"}, limit=1000))
    assert await visitors_by(db, site_id, "page", "30d", {"visitors"}, limit=3, offset=2) == pages[2:5]
    # One per window (7d, 30d) and dimension; the page's under a name of its own (pageviews only).
    runs = {STATES_DIM.get(prop, prop): 2 for prop in store.EVENT_DIMENSION_COLUMNS}
    assert await window_key_runs(db, site_id) == runs
    assert await visitors_by(db, site_id, "page", "30d", {"visitors"}) == pages
    assert await window_key_runs(db, site_id) == runs  # read again, not made again
    # The rows are read from the states: one planted in the 30-day window's computation shows.
    (first, last, computed), = await db.query(
        f"SELECT first, last, max(computed) FROM {db.table('site_window_keys')} WHERE site_id = {{s:String}} "
        "AND dim = 'page:pageviews' AND key = '' GROUP BY first, last ORDER BY first LIMIT 1", {"s": site_id})
    await db.command(f"INSERT INTO {db.table('site_window_keys')} (site_id, first, last, dim, computed, key, visitors) "
                     "SELECT {s:String}, {f:Date}, {l:Date}, 'page:pageviews', {c:DateTime64(6, 'UTC')}, '/planted', "
                     "uniqExactState(toUInt64(number + 1)) FROM numbers(1000)",
                     {"s": site_id, "f": first, "l": last, "c": computed})
    assert (await visitors_by(db, site_id, "page", "30d", {"visitors"}))[0] == ("/planted", 1000)
    await add_late_event(client, database_url, site_id)
    for range_name in ("7d", "30d"):
        late = await visitors_by(db, site_id, "page", range_name, {"visitors"}, limit=1000)
        assert late == await visitors_by(db, site_id, "page", range_name, METRICS, limit=1000)
        assert ("/late", 1) in late and "/planted" not in dict(late)
    assert await window_key_runs(db, site_id) == {**runs, "page:pageviews": 4}


async def goal_rows(db, site_id: str, range_name: str, goals: list) -> list[tuple]:
    w = window_for(range_name)
    rows = await analytics_breakdown.breakdown(db, site_id, w.start, w.end, prop="goal", filters=store.Filters(),
                                               goals=goals, limit=100, offset=0)
    return sorted((r["key"], r["visitors"], r["events"]) for r in rows)


async def goals_from_events(db, site_id: str, range_name: str, goals: list) -> list[tuple]:
    """Each goal's visitors and events counted from the window's events alone."""
    w = window_for(range_name)
    out = []
    for g in goals:
        q = store.Params()
        cond = store.goal_condition(q, g)
        (visitors, events), = await db.query(
            f"SELECT uniqExactIf(visitor, visitor != 0), count() FROM {db.table('site_events')} FINAL WHERE "
            f"site_id = {q.bind(site_id)} AND ts >= {q.bind(w.start, store.TS)} AND ts < {q.bind(w.end, store.TS)} "
            f"AND {cond}", q.params)
        out.append((g.name, visitors, events))
    return sorted(out)


async def test_unfiltered_goals_merge_cached_states_of_ended_days(client, database_url, workspace):
    """The goals panel, unfiltered: each goal's visitors and events over the window's ended days come from
    states made once per window for the site's goals, and equal those counted from the events; a new goal
    makes them again."""
    db, site_id, _ = await mirrored_site(client, database_url, workspace)
    goals = [store.Goal("signup", "signup", None), store.Goal("Visit /blog/**", None, "/blog/**"),
             store.Goal("Visit /nowhere", None, "/nowhere")]
    for range_name in ("7d", "30d"):
        got = await goal_rows(db, site_id, range_name, goals)
        assert got == await goals_from_events(db, site_id, range_name, goals)
        assert dict((k, e) for k, _, e in got)["signup"] > 10 and dict((k, e) for k, _, e in got)["Visit /nowhere"] == 0
    goal_runs = {dim: n for dim, n in (await window_key_runs(db, site_id)).items() if dim.startswith("goals ")}
    assert list(goal_runs.values()) == [2]  # one per window
    assert await goal_rows(db, site_id, "30d", goals) == await goals_from_events(db, site_id, "30d", goals)
    more = [*goals, store.Goal("outbound", "outbound", None)]
    assert await goal_rows(db, site_id, "30d", more) == await goals_from_events(db, site_id, "30d", more)
    goal_runs = {dim: n for dim, n in (await window_key_runs(db, site_id)).items() if dim.startswith("goals ")}
    assert sorted(goal_runs.values()) == [1, 2]  # the new set of goals made its own


async def test_the_hourly_series_of_whole_days_comes_from_the_day_rows(client, database_url, workspace):
    """The 7-day overview (hourly buckets, the dashboard's default) reads its whole days' lists and series from
    the day rows: a count planted in a counted hour shows in the series, and counts made before the hourly
    ones were kept (no hourly rows, no hours marker) are not read for hours, and are made again."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=600)
    expected = await overview(db, site_id, domain, "7d")
    assert expected == await from_events(db, site_id, domain, "7d")
    counted = await computations(db, site_id)
    assert await overview(db, site_id, domain, "7d") == expected
    assert await computations(db, site_id) == counted  # read again, not counted again
    w = window_for("7d")
    day, computed = (await db.query(  # a counted whole day of the window, and its computation
        f"SELECT day, max(computed) FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
        f"AND day IN {{d:Array(Date)}} AND dim = {MARKER} GROUP BY day ORDER BY day LIMIT 1",
        {"s": site_id, "d": whole_days(w.start, w.end)}))[0]
    await db.command(f"INSERT INTO {db.table('site_day_counts')} (site_id, day, computed, name, dim, key, c) VALUES "
                     f"({{s:String}}, {{d:Date}}, {{c:DateTime64(6, 'UTC')}}, 'pageview', {HOURS}, '13', 1000)",
                     {"s": site_id, "d": day, "c": computed})
    planted = datetime(day.year, day.month, day.day, 13, tzinfo=UTC)
    series = (await overview(db, site_id, domain, "7d"))[3]
    assert dict(series)[planted] == dict(expected[3])[planted] + 1000
    await db.command(f"DELETE FROM {db.local_table('site_day_counts')} WHERE site_id = {{s:String}} "
                     f"AND dim IN ({HOURS}, {HOURS_MARKER})", {"s": site_id}, settings={"lightweight_deletes_sync": 2})
    assert await overview(db, site_id, domain, "7d") == expected  # from the events, then counted again
    marked = await db.query(f"SELECT count() FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                            f"AND dim = {HOURS_MARKER}", {"s": site_id})
    assert marked[0][0] > 0
    assert await overview(db, site_id, domain, "7d") == expected == await from_events(db, site_id, domain, "7d")


async def test_unfiltered_series_of_long_windows_take_whole_days_from_the_day_rows(client, database_url, workspace):
    """The time series of a window longer than a week, by day or by hour, sums its counted days' rows: a count
    planted in a counted day and hour shows in both, and not in a week's series, which reads the events."""
    db, site_id, _ = await mirrored_site(client, database_url, workspace, n=600)
    cases = (("30d", "day"), ("30d", "hour"), ("90d", "day"), ("7d", "day"), ("7d", "hour"))
    expected = {case: await series_from_events(db, site_id, *case) for case in cases}
    for case in cases:
        assert await series(db, site_id, *case) == expected[case]  # counts the ended days on the way
    day, computed = (await db.query(  # a counted whole day of every window, and its computation
        f"SELECT day, max(computed) FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
        f"AND day IN {{d:Array(Date)}} AND dim = {MARKER} GROUP BY day ORDER BY day DESC LIMIT 1",
        {"s": site_id, "d": whole_days(window_for("7d").start, window_for("7d").end)}))[0]
    await db.command(f"INSERT INTO {db.table('site_day_counts')} (site_id, day, computed, name, dim, key, c) VALUES "
                     f"({{s:String}}, {{d:Date}}, {{c:DateTime64(6, 'UTC')}}, 'pageview', {TOTAL}, '', 1000), "
                     f"({{s:String}}, {{d:Date}}, {{c:DateTime64(6, 'UTC')}}, 'pageview', {HOURS}, '13', 1000)",
                     {"s": site_id, "d": day, "c": computed})
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    for case in cases:
        planted = midnight + timedelta(hours=13 if case[1] == "hour" else 0)
        got, want = dict(await series(db, site_id, *case)), dict(expected[case])
        assert got[planted] == want[planted] + (1000 if case[0] != "7d" else 0), case
        assert {b: n for b, n in got.items() if b != planted} == {b: n for b, n in want.items() if b != planted}


async def test_a_window_starting_inside_an_ended_day_takes_its_hours_from_the_day_rows(client, database_url,
                                                                                       workspace):
    """The 7-day window starts inside an ended day, at an hour: that day's counts and visits from that hour
    on come from its hourly rows (counts per hour, visits per hour they started in), not from its events and
    session rows. Rows planted in later hours show, in earlier ones do not; days counted before the visits
    were kept per hour are counted again, and the numbers stay those of the events."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=600)
    end = window_for("7d").end
    first_day = (end - timedelta(days=8)).date()
    start = datetime(first_day.year, first_day.month, first_day.day, 5, tzinfo=UTC)

    async def read():
        first, last = start, end - timedelta(hours=1)
        totals, visits, _, _ = await analytics_overview.overview(
            db, site_id, start, end, name="pageview", interval="hour", first=first, last=last, domain=domain,
            limit=5, filters=store.Filters())
        return totals, visits

    f = store.Filters()
    from_events_only = (await store.totals(db, site_id, start, end, f), await store.session_stats(db, site_id, start,
                                                                                                  end, f))
    assert await read() == from_events_only
    computed = (await db.query(f"SELECT max(computed) FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                               f"AND day = {{d:Date}} AND dim = {MARKER}", {"s": site_id, "d": first_day}))[0][0]
    planted = [("5", VISITS, "visits", 1000), ("4", VISITS, "visits", 100), ("pageview", HOURS, "6", 500),
               ("pageview", HOURS, "3", 50)]
    for name, dim, key, c in planted:
        await db.command(f"INSERT INTO {db.table('site_day_counts')} (site_id, day, computed, name, dim, key, c) "
                         "VALUES ({s:String}, {d:Date}, {c:DateTime64(6, 'UTC')}, {n:String}, {m:UInt8}, {k:String}, "
                         "{v:UInt64})", {"s": site_id, "d": first_day, "c": computed, "n": name, "m": dim, "k": key,
                                         "v": c})
    totals, visits = await read()
    expected_totals, expected_visits = from_events_only
    assert visits.sessions == expected_visits.sessions + 1000  # hour 5 on: the window's; hour 4: before it
    assert (totals.events, totals.pageviews) == (expected_totals.events + 500, expected_totals.pageviews + 500)
    # A computation from before the visits were kept per hour (no such marker): counted again, then exact.
    await db.command(f"DELETE FROM {db.local_table('site_day_counts')} WHERE site_id = {{s:String}} "
                     f"AND dim = {VISIT_HOURS_MARKER}", {"s": site_id}, settings={"lightweight_deletes_sync": 2})
    assert await read() == from_events_only
    again = await db.query(f"SELECT count() FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                           f"AND day = {{d:Date}} AND dim = {VISIT_HOURS_MARKER}", {"s": site_id, "d": first_day})
    assert again[0][0] == 1
    assert await read() == from_events_only


async def test_a_window_ending_inside_a_day_holds_none_of_its_later_events(client, database_url, workspace):
    """A window that ends inside a day reads that day's session rows and visitor set only while none of its
    events is at or after the end (a window ending now); else its events before the end. A visitor seen only
    after the end, and the part of a visit after it, are left out."""
    site_id, domain = await generated_site(database_url, workspace, n=300)
    w = window_ending_inside_a_day()
    start, end = w.start, w.end
    await add_visits_around_end(database_url, site_id, end)
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    # Unfiltered, the check is in counted_days; filtered, in the totals query before the visits.
    for f in (store.Filters(), store.Filters(extra=(Filter("country", "==", "NZ"),))):
        totals, visits, _, _ = await analytics_overview.overview(
            db, site_id, start, end, name="pageview", interval="hour", first=start, last=end - timedelta(hours=1),
            domain=domain, limit=5, filters=f)
        assert (totals, visits) == (await store.totals(db, site_id, start, end, f),
                                    await store.session_stats(db, site_id, start, end, f))
        assert visits.sessions > 0
    later = await store.totals(db, site_id, end, end + timedelta(minutes=15), store.Filters())
    assert later.visitors >= 2  # both visitors have events after the end, in the day's rows and set


async def test_a_batch_written_twice_changes_no_day_row(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=400)
    expected = await overview(db, site_id, domain)
    counted = await computations(db, site_id)
    await write_site_events_again(db, database_url, site_id)
    assert await overview(db, site_id, domain) == expected == await from_events(db, site_id, domain)
    assert await computations(db, site_id) > counted  # the days the copies touched were counted again


async def test_a_late_event_in_a_counted_day_is_counted(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=300)
    before = await overview(db, site_id, domain)
    counted, cached = await computations(db, site_id), await cached_windows(db, site_id)
    at = await add_late_event(client, database_url, site_id)
    after = await overview(db, site_id, domain)
    # That day counted again, and the days before and after it (those with events), whose visits depend on it.
    around = await db.query(f"SELECT count(DISTINCT day) FROM {db.table('site_days')} WHERE site_id = {{s:String}} "
                            "AND day IN {d:Array(Date)}",
                            {"s": site_id, "d": [at.date() + timedelta(days=i) for i in (-1, 0, 1)]})
    assert await computations(db, site_id) == counted + around[0][0]
    assert await cached_windows(db, site_id) == cached + 1  # the window's visitors merged again
    assert after == await from_events(db, site_id, domain)
    assert await overview(db, site_id, domain, "7d") == await from_events(db, site_id, domain, "7d")
    assert (after[0].events, after[0].pageviews, after[0].visitors) == (
        before[0].events + 1, before[0].pageviews + 1, before[0].visitors + 1)
    assert (after[1].sessions, after[1].bounces) == (before[1].sessions + 1, before[1].bounces + 1)
    day = int(datetime.combine(at.date(), datetime.min.time(), UTC).timestamp())
    assert dict((int(b.timestamp()), n) for b, n in after[3])[day] == dict(
        (int(b.timestamp()), n) for b, n in before[3])[day] + 1


async def test_visits_across_midnight_come_from_the_day_rows_exactly(client, database_url, workspace):
    """A visit belongs to the day it started on, with its whole duration, also when it goes on past
    midnight; an event added to the next day changes the day's visit statistics (computed again)."""
    site_id, domain = await generated_site(database_url, workspace, n=300)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        ws = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site_id)
        visit = ("pageview", "/night", "", "NZ", f"owl-{site_id}", f"owl-{site_id}")
        await insert_events(conn, site_id, ws, [(f"evt_owl{i}_{site_id}", *visit, midnight + offset, None)
                                                for i, offset in enumerate((-timedelta(minutes=10),
                                                                            timedelta(minutes=5)))])
        # And one from yesterday, whose visits the day rows hold, into today, whose visits they do not.
        await insert_events(conn, site_id, ws, [(f"evt_bat{i}_{site_id}", "pageview", "/", "", "NZ", f"bat-{site_id}",
                                                 f"bat-{site_id}", midnight + timedelta(days=3) + offset, None)
                                                for i, offset in enumerate((-timedelta(minutes=1),
                                                                            timedelta(seconds=30)))])
        await client.app[MIRROR].catch_up()
        db = client.app[ANALYTICS]
        before = await overview(db, site_id, domain)
        assert before == await from_events(db, site_id, domain)
        day_before = (midnight - timedelta(days=1)).date()
        assert await db.query(f"SELECT c FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                              "AND day = {d:Date} AND dim = 4 AND key = 'visits' ORDER BY computed DESC LIMIT 1",
                              {"s": site_id, "d": day_before}) != []  # the day's visits came from the day rows
        # A late event on the day before the visit's: that day's neighbours are counted again, the visit's
        # day included, whose visit still ends on the day after.
        await insert_events(conn, site_id, ws, [(f"evt_early_{site_id}", "pageview", "/", "", "NZ", f"e-{site_id}",
                                                 f"e-{site_id}", midnight - timedelta(days=1, hours=12), None)])
        await client.app[MIRROR].catch_up()
        assert await overview(db, site_id, domain) == await from_events(db, site_id, domain)
        before = await overview(db, site_id, domain)
        counted = await computations(db, site_id)
        await insert_events(conn, site_id, ws, [(f"evt_owl9_{site_id}", *visit, midnight + timedelta(minutes=20),
                                                 None)])
    finally:
        await conn.close()
    await client.app[MIRROR].catch_up()
    after = await overview(db, site_id, domain)
    assert after == await from_events(db, site_id, domain)
    assert await computations(db, site_id) > counted
    assert after[1].sessions == before[1].sessions  # the same visit, 15 minutes longer
    total_ms = after[1].avg_ms * after[1].sessions - before[1].avg_ms * before[1].sessions
    assert round(total_ms) == 15 * 60 * 1000


async def test_counts_computed_before_the_visits_were_kept_are_not_read_for_visits(client, database_url, workspace):
    """A store's day counts from before the visits (no visit rows, no visits marker) leave the visits to the
    live read, and the days get them when counted again."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=400)
    expected = await overview(db, site_id, domain)
    await db.command(f"DELETE FROM {db.local_table('site_day_counts')} WHERE site_id = {{s:String}} "
                     "AND dim IN (4, 254)", {"s": site_id}, settings={"lightweight_deletes_sync": 2})
    assert await overview(db, site_id, domain) == expected == await from_events(db, site_id, domain)
    marked = await db.query(f"SELECT count() FROM {db.table('site_day_counts')} WHERE site_id = {{s:String}} "
                            "AND dim = 254", {"s": site_id})
    assert marked[0][0] > 0  # the ended days were counted again, with their visits
    assert await overview(db, site_id, domain) == expected


async def test_an_interrupted_computation_is_not_read(client, database_url, workspace):
    """Rows of a computation whose marker was never written (a crash in between) are ignored."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=300)
    expected = await overview(db, site_id, domain)
    days = whole_days(*[getattr(window_for("30d"), a) for a in ("start", "end")])[:-1]
    await db.command(f"INSERT INTO {db.table('site_day_counts')} (site_id, day, computed, name, dim, key, c) "
                     "SELECT {s:String}, arrayJoin({d:Array(Date)}), now64(6, 'UTC') + 1000, 'pageview', t.1, t.2, "
                     "1000 FROM (SELECT arrayJoin([(0, '/ghost'), (3, ''), (4, 'visits'), (5, '12')]) AS t)",
                     {"s": site_id, "d": days})
    assert await overview(db, site_id, domain) == expected
    assert await overview(db, site_id, domain, "7d") == await from_events(db, site_id, domain, "7d")


async def test_rebuild_since_a_day_keeps_the_day_rows_exact(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=400)
    expected = await overview(db, site_id, domain)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        # From a minute before a pageview of ten days ago: the generated site has a few visits a day, and a
        # fixed hour of that day sometimes had none to drop (then `gone` was 0 and the test failed).
        since = await conn.fetchval("SELECT min(ts) FROM events WHERE site_id = $1 AND name = 'pageview' "
                                    "AND ts >= now() - interval '10 days'", site_id) - timedelta(minutes=1)
        # Events PostgreSQL no longer holds after `since` (as after a restore): the rebuild drops them.
        gone = await conn.fetchval("WITH d AS (DELETE FROM events WHERE site_id = $1 AND ts >= $2 "
                                   "AND ts < $2 + interval '1 day' AND name = 'pageview' RETURNING 1) "
                                   "SELECT count(*) FROM d", site_id, since)
        await analytics_mirror.rebuild(conn, db, since=since)
    finally:
        await conn.close()
    after = await overview(db, site_id, domain)
    assert after == await from_events(db, site_id, domain)
    assert after[0].pageviews == expected[0].pageviews - gone < expected[0].pageviews


async def test_a_store_without_the_day_tables_derives_them(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=300, seed_=5)
    await db.command(f"DROP VIEW {db.database}.site_days_mv")
    for name in ("site_days", "site_day_counts"):
        await db.command(f"DROP TABLE {db.local_table(name)}")
    await asyncio.to_thread(ensure_schema, db)
    assert await overview(db, site_id, domain) == await from_events(db, site_id, domain)
    # The view is back: a later site's events reach the day rows too.
    other, other_domain = await generated_site(database_url, workspace, n=200, seed_=6)
    await client.app[MIRROR].catch_up()
    assert await overview(db, other, other_domain) == await from_events(db, other, other_domain)


async def test_day_tables_from_before_their_one_row_granules_are_made_again(client, database_url, workspace):
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=300, seed_=9)
    expected = await overview(db, site_id, domain)
    assert await cached_windows(db, site_id) == 1
    granules = ("SELECT engine_full LIKE '%index_granularity = 1%' FROM system.tables "
                "WHERE database = {d:String} AND name IN {t:Array(String)} ORDER BY name")
    held = [db.local_table(name).split(".", 1)[1] for name in STATE_TABLES]  # `_local` in cluster mode
    for name in STATE_TABLES:  # as before: the default granules, with the rows they held
        table = db.local_table(name)
        body = TABLES[name][0].replace(ROW_GRANULES, "").format(engine=TABLES[name][2])
        await db.command(f"CREATE TABLE {table}_old {body}")
        await db.command(f"INSERT INTO {table}_old SELECT * FROM {table}")
        await db.command(f"EXCHANGE TABLES {table} AND {table}_old")
        await db.command(f"DROP TABLE {table}_old")
    assert await db.query(granules, {"d": db.database, "t": held}) == [(0,), (0,)]
    await asyncio.to_thread(ensure_schema, db)
    assert await db.query(granules, {"d": db.database, "t": held}) == [(1,), (1,)]
    # site_days derived again from the events, the window's visitors cached again: the same overview.
    assert await overview(db, site_id, domain) == expected == await from_events(db, site_id, domain)
    assert await cached_windows(db, site_id) == 1
    # The view feeds the new site_days: a later site's overview is exact too.
    other, other_domain = await generated_site(database_url, workspace, n=200, seed_=10)
    await client.app[MIRROR].catch_up()
    assert await overview(db, other, other_domain) == await from_events(db, other, other_domain)


async def test_an_empty_site_has_an_empty_overview(client, database_url, workspace):
    conn = await asyncpg.connect(database_url)
    try:
        site_id, domain, _ = await create_site(conn, workspace)
    finally:
        await conn.close()
    db = client.app[ANALYTICS]
    totals, sessions, tops, points = await overview(db, site_id, domain)
    assert (totals.events, totals.visitors, sessions.sessions) == (0, 0, 0)
    assert all(v == 0 for _, v in points) and all(rows == ([], 0) for rows in tops.values())


async def test_a_backfill_cut_short_is_done_again(client, database_url, workspace):
    """A store closed during its backfill: the table exists but is not marked complete."""
    db, site_id, domain = await mirrored_site(client, database_url, workspace, n=300, seed_=8)
    await db.command(f"TRUNCATE TABLE {db.local_table('site_days')}")
    await db.command(f"ALTER TABLE {db.local_table('site_days')} MODIFY COMMENT ''")
    await asyncio.to_thread(ensure_schema, db)
    assert await overview(db, site_id, domain) == await from_events(db, site_id, domain)
