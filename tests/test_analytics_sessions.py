"""Sessions kept by the engine (site_sessions, one row per site, day and session): visits, bounces and
durations stay exact for sessions that cross midnight, the window's end or its start, after a
`rebuild --since` in the middle of a day, when an existing store gains the table (backfill) and its
page column becomes LowCardinality, and when its events are re-sorted by the current key."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from app.appkeys import ANALYTICS, MIRROR
from storage import analytics as store
from storage import analytics_mirror
from storage.clickhouse import Params
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import CODECS, SITE_ORDER, TABLES
from storage.db import init_connection
from storage.site_filters import Filter
from tests.analytics_support import create_site, insert_events

H, M = timedelta(hours=1), timedelta(minutes=1)


async def edge_sessions(client, database_url: str, workspace: str) -> tuple:
    """Sessions around a window [day + 6 h, day + 1 d + 12 h), mirrored to the store; returns (store, site,
    day, start, end)."""
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        spec = [  # (session, name, offset from day, country)
            ("a", "pageview", 5 * H, "US"), ("a", "pageview", 6 * H + 30 * M, "US"),  # began before the window
            ("b", "pageview", 23 * H + 50 * M, "DE"), ("b", "pageview", 24 * H + 10 * M, "US"),  # crosses midnight
            ("c", "pageview", 35 * H + 50 * M, "US"), ("c", "pageview", 36 * H + 10 * M, "US"),  # crosses the end
            ("d", "pageview", 27 * H, "DE"), ("d", "click", 27 * H + 5 * M, "US"),  # one pageview
            ("e", "click", 7 * H, "US"),  # no pageview
            ("f", "pageview", 37 * H, "US"),  # after the window
            ("g", "pageview", -1 * H, "US"), ("g", "pageview", 30 * M, "US"),  # began in the look-back day
            ("h", "pageview", 8 * H, "DE"), ("h", "pageview", 8 * H, "DE"),  # two pageviews, one instant
        ]
        await insert_events(conn, site_id, ws, [
            (f"evt_edge_{site_id}_{i}", name, "/", "", country, "v", f"{s}-{site_id}", day + offset, None)
            for i, (s, name, offset, country) in enumerate(spec)])
    finally:
        await conn.close()
    await client.app[MIRROR].catch_up()
    return client.app[ANALYTICS], site_id, day, day + 6 * H, day + 36 * H


async def postgres_stats(database_url: str, site_id: str, start: datetime, end: datetime,
                         extra: str = "") -> tuple[int, int, float]:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "WITH s AS (SELECT session_id, min(ts) AS first, max(ts) AS last, "
            "count(*) FILTER (WHERE name = 'pageview') AS pv FROM events WHERE site_id = $1 AND ts < $3 "
            "GROUP BY session_id HAVING min(ts) >= $2) "
            "SELECT count(*) AS n, count(*) FILTER (WHERE pv = 1) AS b, "
            "coalesce(avg(extract(epoch FROM last - first) * 1000), 0)::float8 AS ms FROM s WHERE session_id IN "
            f"(SELECT session_id FROM events WHERE site_id = $1 AND ts >= $2 AND ts < $3{extra})",
            site_id, start, end)
    finally:
        await conn.close()
    return row["n"], row["b"], round(row["ms"], 3)


async def engine_stats(db, site_id: str, start: datetime, end: datetime, filters: store.Filters | None = None):
    got = await store.session_stats(db, site_id, start, end, filters or store.Filters())
    return got.sessions, got.bounces, round(got.avg_ms, 3)


async def test_sessions_crossing_midnight_and_the_window_edges_match_postgresql(client, database_url, workspace):
    db, site_id, _, start, end = await edge_sessions(client, database_url, workspace)
    # b, c, d, e, h: c counts only its pageview before the end (a bounce, 0 s), h has two pageviews.
    assert await engine_stats(db, site_id, start, end) == (5, 2, 300_000.0)
    assert await engine_stats(db, site_id, start, end) == await postgres_stats(database_url, site_id, start, end)
    de = store.Filters(extra=(Filter("country", "==", "DE"),))
    assert await engine_stats(db, site_id, start, end, de) == (3, 1, 500_000.0)  # b, d, h
    assert await engine_stats(db, site_id, start, end, de) == await postgres_stats(
        database_url, site_id, start, end, " AND country = 'DE'")
    # An end after the last event of its day (f's): that day's part comes from its session rows, not its events.
    later = end + 2 * H
    assert await engine_stats(db, site_id, start, later) == (6, 2, 450_000.0)  # b, c, d, e, f, h
    assert await engine_stats(db, site_id, start, later) == await postgres_stats(database_url, site_id, start, later)


async def test_matching_sessions_found_by_marked_rows_are_those_of_the_set(client, database_url, workspace):
    """sessions_of's two ways to keep the sessions holding a matching event (the overview picks one by the
    share of matching events) give the same visits, midnight and window edges included."""
    db, site_id, _, start, end = await edge_sessions(client, database_url, workspace)
    table = db.table("site_events")
    for terms, pg in (([Filter("country", "==", "DE")], " AND country = 'DE'"),
                      ([Filter("event", "==", "pageview")], " AND name = 'pageview'")):
        q = Params()
        marked = store.sessions_of(q, db, site_id, start, end, marked=store.where(q, table, site_id, start, end, terms))
        n, b, us = (await db.query(store.VISIT_SUMS + marked, q.params))[0]
        got = store.SessionStats.of(n, b, us)
        assert (got.sessions, got.bounces, round(got.avg_ms, 3)) == await postgres_stats(
            database_url, site_id, start, end, pg) == await engine_stats(db, site_id, start, end,
                                                                         store.Filters(extra=tuple(terms)))


async def test_rebuild_since_the_middle_of_a_day_keeps_sessions_exact(client, database_url, workspace):
    db, site_id, day, start, end = await edge_sessions(client, database_url, workspace)
    before = await engine_stats(db, site_id, start, end)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:  # e's only event is before `since`, on the same day as h's and b's after it
        assert await analytics_mirror.rebuild(conn, db, since=day + 7 * H + 30 * M) >= 6
    finally:
        await conn.close()
    assert await engine_stats(db, site_id, start, end) == before == (5, 2, 300_000.0)


async def test_a_store_without_the_sessions_table_derives_it_from_its_events(client, database_url, workspace):
    db, site_id, _, start, end = await edge_sessions(client, database_url, workspace)
    await db.command(f"DROP VIEW {db.database}.site_sessions_mv")
    await db.command(f"DROP TABLE {db.local_table('site_sessions')}")
    with pytest.raises(Exception, match="site_sessions"):  # gone, as in a store from before it
        await engine_stats(db, site_id, start, end)
    await db.command(f"ALTER TABLE {db.local_table('site_events')} MODIFY COLUMN page String, "  # as at first
                     "MODIFY COLUMN referrer_host String, MODIFY COLUMN city String")
    await asyncio.to_thread(ensure_schema, db)
    assert await engine_stats(db, site_id, start, end) == (5, 2, 300_000.0)
    assert await db.query("SELECT DISTINCT type FROM system.columns WHERE database = {d:String} "
                          "AND table = 'site_events' AND name IN ('page', 'referrer_host', 'city')",
                          {"d": db.database}) == [("LowCardinality(String)",)]


async def test_a_store_from_before_the_codecs_gets_them_with_the_same_answers(client, database_url, workspace):
    db, site_id, _, start, end = await edge_sessions(client, database_url, workspace)
    codecs = ("SELECT table, name, compression_codec FROM system.columns WHERE database = {d:String} "
              "AND compression_codec NOT IN ('', 'CODEC(Default)') ORDER BY table, name")
    # In cluster mode each shard's table and the Distributed one over it, whose columns must match.
    tables = {t: sorted({db.local_table(t), db.table(t)}) for t in CODECS}
    declared = sorted((held.split(".", 1)[1], c, codec) for t, columns in CODECS.items() for held in tables[t]
                      for c, codec in columns.items())
    assert await db.query(codecs, {"d": db.database}) == declared
    for table, columns in CODECS.items():  # as before them (the event times, then hashes and session rows raw)
        for held in tables[table]:
            await db.command(f"ALTER TABLE {held} " + ", ".join(f"MODIFY COLUMN {c} CODEC(Default)" for c in columns))
    assert await db.query(codecs, {"d": db.database}) == []
    before = await engine_stats(db, site_id, start, end)
    await asyncio.to_thread(ensure_schema, db)
    assert await engine_stats(db, site_id, start, end) == before == (5, 2, 300_000.0)
    assert await db.query(codecs, {"d": db.database}) == declared
    assert ("site_sessions", "entry", "CODEC(NONE)") in declared


async def test_a_store_sorted_the_old_way_is_re_sorted_with_the_same_rows_and_answers(client, database_url, workspace):
    db, site_id, day, start, end = await edge_sessions(client, database_url, workspace)
    table = db.local_table("site_events")
    key = ("SELECT sorting_key FROM system.tables WHERE database = {d:String} AND name = {t:String}")
    names = {"d": db.database, "t": table.split(".", 1)[1]}  # `site_events_local` in cluster mode
    rows = f"SELECT count(), sum(cityHash64(id, country, ts, session)) FROM {table} FINAL WHERE site_id = {{s:String}}"
    # As before the key named country and browser, with the region column added last by an ALTER.
    old = TABLES["site_events"][0].replace(f"ORDER BY ({SITE_ORDER})", "ORDER BY (site_id, toDate(ts), name, ts, id)")
    await db.command(f"CREATE TABLE {table}_old {old.format(engine='ReplacingMergeTree')}")
    await db.command(f"ALTER TABLE {table}_old DROP COLUMN region")
    await db.command(f"ALTER TABLE {table}_old ADD COLUMN region LowCardinality(String)")
    await db.command(f"INSERT INTO {table}_old SELECT * EXCEPT region, region FROM {table}")
    await db.command(f"EXCHANGE TABLES {table} AND {table}_old")
    await db.command(f"DROP TABLE {table}_old")
    await db.command(f"CREATE TABLE {table}_resorted (x UInt8) ENGINE = Memory")  # a copy cut short
    assert await db.query(key, names) == [("site_id, toDate(ts), name, ts, id",)]
    before, stats = await db.query(rows, {"s": site_id}), await engine_stats(db, site_id, start, end)
    assert before[0][0] == 14 and stats == (5, 2, 300_000.0)

    await asyncio.to_thread(ensure_schema, db)
    assert await db.query(key, names) == [(SITE_ORDER,)]
    assert await db.query(rows, {"s": site_id}) == before
    assert await engine_stats(db, site_id, start, end) == stats
    assert not await db.query("SELECT name FROM system.tables WHERE database = {d:String} AND name LIKE '%resorted'",
                              {"d": db.database})
    # The views follow the name: a new event reaches the re-sorted table and the session rows.
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        ws = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site_id)
        await insert_events(conn, site_id, ws, [(f"evt_late_{site_id}", "pageview", "/", "", "DE", "v",
                                                 f"i-{site_id}", day + 8 * H, None)])
    finally:
        await conn.close()
    await client.app[MIRROR].catch_up()
    assert (await db.query(rows, {"s": site_id}))[0][0] == 15
    assert await engine_stats(db, site_id, start, end) == (6, 3, 250_000.0)
