"""Entry and exit pages kept by the engine (site_sessions' visitor, entry and exit columns): the entry- and
exit-page breakdowns agree exactly with PostgreSQL on a generated data set, filtered or not, stay the
same when a mirror batch is written twice, and a store from before those columns gains them."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from app.appkeys import ANALYTICS, MIRROR
from app.views.analytics_params import window_for
from storage import analytics as store
from storage import analytics_breakdown
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import PV_MAX, PV_MIN
from storage.site_filters import METRICS, Filter
from tests.analytics_support import add_visits_around_end, window_ending_inside_a_day, write_site_events_again
from tests.test_analytics_engine import generated_site

PAGE = "split_part(split_part(coalesce(path, ''), '#', 1), '?', 1)"
FILTERS = {
    "none": ([], ""),
    "country": ([Filter("country", "==", "DE")], " AND country = 'DE'"),
    "country+page": ([Filter("country", "!=", "US"), Filter("page", "~=", "blog")],
                     f" AND coalesce(country, '') <> 'US' AND strpos(lower({PAGE}), 'blog') > 0"),
}


async def postgres_visits(database_url: str, site_id: str, w, which: str, extra: str) -> dict[str, dict]:
    """The visits that started in the window (holding a matching event), by entry or exit page."""
    order = "ts, id COLLATE \"C\"" if which == "entry_page" else "ts DESC, id COLLATE \"C\" DESC"
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            f"WITH e AS (SELECT *, {PAGE} AS page FROM events WHERE site_id = $1 AND ts < $3), "
            "s AS (SELECT session_id, min(ip_hash) AS visitor, min(ts) AS first, max(ts) AS last, "
            "count(*) FILTER (WHERE name = 'pageview') AS pv, count(*) AS ev, "
            f"(array_agg(page ORDER BY {order}) FILTER (WHERE name = 'pageview' AND page <> ''))[1] AS key "
            "FROM e GROUP BY session_id HAVING min(ts) >= $2) "
            "SELECT key, count(DISTINCT visitor) AS visitors, count(*) AS visits, sum(pv) AS pageviews, "
            "sum(ev) AS events, count(*) FILTER (WHERE pv = 1) AS bounces, "
            "avg(extract(epoch FROM last - first) * 1000)::float8 AS ms FROM s WHERE key IS NOT NULL AND "
            f"session_id IN (SELECT session_id FROM events WHERE site_id = $1 AND ts >= $2 AND ts < $3{extra}) "
            "GROUP BY key", site_id, w.start, w.end)
    finally:
        await conn.close()
    return {r["key"]: {"key": r["key"], "visitors": r["visitors"], "visits": r["visits"], "pageviews": r["pageviews"],
                       "events": r["events"], "bounce_rate": round(100 * r["bounces"] / r["visits"], 2),
                       "visit_duration": round(r["ms"])} for r in rows}


async def engine_visits(db, site_id: str, w, which: str, terms: list[Filter],
                        metrics=METRICS) -> dict[str, dict]:
    rows = await analytics_breakdown.breakdown(db, site_id, w.start, w.end, prop=which, goals=[], limit=1000,
                                               offset=0, filters=store.Filters(extra=tuple(terms)), metrics=metrics)
    assert [r["visitors"] for r in rows] == sorted((r["visitors"] for r in rows), reverse=True)
    return {r["key"]: r for r in rows}


def same(got: dict[str, dict], expected: dict[str, dict]) -> None:
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        # The average duration is a float on both sides: its rounding to a millisecond may differ by one.
        assert abs(got[key]["visit_duration"] - row["visit_duration"]) <= 1, key
        assert {**got[key], "visit_duration": 0} == {**row, "visit_duration": 0}, key


@pytest.mark.parametrize("range_name", ["7d", "30d"])
@pytest.mark.parametrize("case", list(FILTERS))
async def test_entry_and_exit_pages_match_postgresql(client, database_url, workspace, range_name, case):
    site_id, _ = await generated_site(database_url, workspace)
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    terms, pg = FILTERS[case]
    w = window_for(range_name)
    for which in ("entry_page", "exit_page"):
        expected = await postgres_visits(database_url, site_id, w, which, pg)
        assert expected, which
        same(await engine_visits(db, site_id, w, which, terms), expected)
        # Without the counted metrics (what the dashboard asks): the same visitors and visits.
        light = await engine_visits(db, site_id, w, which, terms, metrics=("visitors", "visits"))
        assert {k: (r["visitors"], r["visits"]) for k, r in light.items()} == {
            k: (r["visitors"], r["visits"]) for k, r in expected.items()}
    # An entry-page filter selects the events (in the window) of the visits entering there.
    page = max(expected, key=lambda k: (expected[k]["visits"], k))
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            f"WITH e AS (SELECT *, {PAGE} AS page FROM events WHERE site_id = $1 AND ts < $3) "
            "SELECT count(*) AS n, count(DISTINCT ip_hash) AS v FROM events WHERE site_id = $1 AND ts >= $2 "
            f"AND ts < $3{pg} AND session_id IN (SELECT session_id FROM e GROUP BY session_id HAVING "
            "(array_agg(page ORDER BY ts DESC, id COLLATE \"C\" DESC) "
            "FILTER (WHERE name = 'pageview' AND page <> ''))[1] = $4)", site_id, w.start, w.end, page)
    finally:
        await conn.close()
    totals = await store.totals(db, site_id, w.start, w.end, store.Filters(extra=(
        *terms, Filter("exit_page", "==", page))))
    assert (totals.events, totals.visitors) == (row["n"], row["v"]) != (0, 0)


async def test_a_window_ending_inside_a_day_leaves_out_its_later_events(client, database_url, workspace):
    """Entry and exit pages, and a breakdown's bounce rate and duration, over a window that ends inside a day
    with events after the end (a visit going on past it, a visit after it): those events never count, and
    the answers are PostgreSQL's."""
    site_id, _ = await generated_site(database_url, workspace, n=300)
    w = window_ending_inside_a_day()
    await add_visits_around_end(database_url, site_id, w.end)
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    for which in ("entry_page", "exit_page"):
        expected = await postgres_visits(database_url, site_id, w, which, "")
        assert expected.get("/", {}).get("visits", 0) > 0, which
        same(await engine_visits(db, site_id, w, which, []), expected)
    # The visit going on past the end: one pageview in the window, a bounce of no duration.
    pages = await analytics_breakdown.breakdown(db, site_id, w.start, w.end, prop="page", goals=[], limit=10,
                                                offset=0, filters=store.Filters(extra=(Filter("country", "==", "NZ"),)))
    assert [(r["key"], r["visitors"], r["visits"], r["bounce_rate"], r["visit_duration"]) for r in pages] == \
        [("/", 1, 1, 100.0, 0)]


async def test_a_batch_written_twice_keeps_entry_and_exit_pages(client, database_url, workspace):
    site_id, _ = await generated_site(database_url, workspace, n=300)
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    w = window_for("30d")
    before = {which: await engine_visits(db, site_id, w, which, []) for which in ("entry_page", "exit_page")}
    await write_site_events_again(db, database_url, site_id)
    for which in ("entry_page", "exit_page"):
        assert await engine_visits(db, site_id, w, which, []) == before[which]
        same(before[which], await postgres_visits(database_url, site_id, w, which, ""))


async def test_a_sessions_table_without_the_visit_columns_gains_them(client, database_url, workspace):
    """A store from before the columns: its view wrote session rows without them, for events of a site
    that is then read after ensure_schema has migrated it."""
    db = client.app[ANALYTICS]
    await client.app[MIRROR].catch_up()
    sessions = db.local_table("site_sessions")
    await db.command(f"DROP VIEW {db.database}.site_sessions_mv")
    await db.command(f"ALTER TABLE {sessions} DROP COLUMN visitor, DROP COLUMN entry, DROP COLUMN exit")
    await db.command(f"ALTER TABLE {sessions} MODIFY COMMENT ''")  # not marked complete, as then
    await db.command(  # the view as it was
        f"CREATE MATERIALIZED VIEW {db.database}.site_sessions_mv TO {sessions} AS SELECT site_id, "
        f"toDate(ts) AS day, session, min(ts) AS first, max(ts) AS last, min({PV_MIN}) AS pv_min, "
        f"max({PV_MAX}) AS pv_max FROM {db.local_table('site_events')} WHERE session != 0 "
        "GROUP BY site_id, day, session")
    site_id, _ = await generated_site(database_url, workspace, n=300, seed_=11)
    await client.app[MIRROR].catch_up()
    await asyncio.to_thread(ensure_schema, db)
    w = window_for("30d")
    for which in ("entry_page", "exit_page"):
        same(await engine_visits(db, site_id, w, which, []),
             await postgres_visits(database_url, site_id, w, which, ""))
    # The view writes the new columns again: a later batch of another site is read exactly too.
    other, _ = await generated_site(database_url, workspace, n=200, seed_=12)
    await client.app[MIRROR].catch_up()
    same(await engine_visits(db, other, w, "entry_page", []),
         await postgres_visits(database_url, other, w, "entry_page", ""))
