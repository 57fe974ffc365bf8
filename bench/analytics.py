"""Site analytics read benchmark: the analytics engine (embedded ClickHouse, chDB) against the same reads
as plain PostgreSQL queries on the same data, in one run.

    .venv/bin/python bench/analytics.py [--events 10000000] [--days 30|90|365] [--runs 11] [--pg-runs 3] [--keep]
                                        [--time-zone ZONE] [--engagement]

Creates a fresh database on the local PostgreSQL (BENCH_PG), applies the migrations and generates one
site's events in SQL (sessions of 5 events spread over 30 days, or `--days`, 200,000 visitors, every visit
dimension filled: device, UTM, region and city; clicks carry a `plan` property) with the events triggers off.
Then `tally analytics rebuild`'s code path copies them into a fresh embedded store (timed), and each 30-day
query (`--days 90`: each `range=90d` one) is timed interleaved: the engine's storage call (what the HTTP views
run) and a straightforward PostgreSQL query of the same numbers. Then every breakdown the API offers, under
three filters, on the engine alone.
Prints p50/p99 per side, bytes per event on each side, the rebuild rate and the process's peak RSS (chDB
runs in this process).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import resource
import secrets
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.views.analytics import overview_body, with_engagement  # noqa: E402
from app.views.analytics_params import Site, window_for  # noqa: E402
from storage import analytics as store  # noqa: E402
from storage import analytics_breakdown, analytics_lists  # noqa: E402
from storage.analytics_mirror import rebuild  # noqa: E402
from storage.clickhouse import open_store  # noqa: E402
from storage.db import init_connection  # noqa: E402
from storage.events import ensure_partitions  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.site_filters import DIMENSIONS, METRICS, Filter  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SITE = Site("bench-site", "bench.example")
CHUNK = 1_000_000

# Sessions of 5 events (g / 5), newest first over $3 (30 days); 80% pageviews; a third of the pages under /blog.
GENERATE = """
INSERT INTO events (id, workspace_id, env, site_id, name, session_id, properties, url, path, referrer, title,
                    viewport_w, country, ip_hash, ts, received_at, browser, os, device, source, channel,
                    browser_version, os_version, utm_source, utm_medium, utm_campaign, utm_term, utm_content,
                    region, city)
SELECT 'evt_b' || g, $1, 'live', 'bench-site', CASE WHEN g % 10 < 8 THEN 'pageview' ELSE 'click' END,
       'ses_' || (g / 5),
       CASE WHEN g % 10 < 8 THEN '{}'::jsonb ELSE jsonb_build_object('plan', (ARRAY['free', 'pro', 'team'])[1 + g % 3])
       END, 'https://bench.example' || p, p,
       (ARRAY['', 'https://www.google.com/', 'https://news.ycombinator.com/item', 'https://t.co/x'])[1 + (g / 5) % 4],
       'Title', 1280, (ARRAY['US', 'DE', 'FR', 'GB', 'IN', 'BR'])[1 + (g / 5 / 7) % 6], 'v' || ((g / 5) % 200000),
       t, t, (ARRAY['Chrome', 'Firefox', 'Safari'])[1 + (g / 5) % 3],
       (ARRAY['Windows', 'macOS', 'Android'])[1 + (g / 5 / 3) % 3],
       (ARRAY['desktop', 'mobile'])[1 + (g / 5) % 2],
       (ARRAY['', 'Google', 'Hacker News', 'Twitter'])[1 + (g / 5) % 4],
       (ARRAY['Direct', 'Organic Search', 'Referral', 'Organic Social'])[1 + (g / 5) % 4],
       (ARRAY['120', '121', '17', '131'])[1 + (g / 5 / 2) % 4], (ARRAY['10', '11', '14', '15'])[1 + (g / 5 / 5) % 4],
       (ARRAY['', 'newsletter', 'google', 'twitter', 'partner'])[1 + (g / 5 / 11) % 5],
       (ARRAY['', 'email', 'cpc', 'social', 'referral'])[1 + (g / 5 / 11) % 5],
       CASE WHEN (g / 5 / 11) % 5 = 0 THEN '' ELSE 'campaign-' || ((g / 5) % 40) END,
       CASE WHEN (g / 5 / 11) % 5 = 2 THEN 'term-' || ((g / 5) % 200) ELSE '' END,
       CASE WHEN (g / 5 / 11) % 5 = 0 THEN '' ELSE 'content-' || ((g / 5) % 7) END,
       (ARRAY['CA', 'BE', 'IDF', 'ENG', 'MH', 'SP'])[1 + (g / 5 / 7) % 6],
       'city-' || ((g / 5 / 7) % 6) || '-' || ((g / 5) % 50)
FROM (SELECT g, CASE WHEN g % 3 = 0 THEN '/blog/post-' || (g % 97) ELSE '/docs/' || (g % 300) END AS p,
             $2::timestamptz - $3::interval * ((g / 5)::float8 / $4) + (g % 5) * interval '40 seconds' AS t
      FROM generate_series($5::bigint, $6::bigint) AS g) s
"""

# With --engagement: one engagement event per pageview (what Plausible's current tracker sends when a page is
# left), 30 s after it, in its visit, with a scroll depth and a time of up to a minute.
ENGAGEMENT = """
INSERT INTO events (id, workspace_id, env, site_id, name, session_id, properties, url, path, referrer, title,
                    viewport_w, country, ip_hash, ts, received_at, browser, os, device, source, channel,
                    browser_version, os_version, utm_source, utm_medium, utm_campaign, utm_term, utm_content,
                    region, city)
SELECT 'evt_e' || substr(id, 6), workspace_id, env, site_id, 'engagement', session_id,
       jsonb_build_object('$scroll_depth', (hashtext(id) & 127) % 101,
                          '$engagement_time', 1000 + (hashtext(id) & 65535)),
       url, path, referrer, title, viewport_w, country, ip_hash, ts + interval '30 seconds', received_at, browser, os,
       device, source, channel, browser_version, os_version, utm_source, utm_medium, utm_campaign, utm_term,
       utm_content, region, city
FROM events WHERE site_id = 'bench-site' AND name = 'pageview'
"""

CASES = {
    "unfiltered": ((), ""),
    "path contains /blog": ((Filter("page", "~=", "/blog"),), " AND strpos(lower(path), '/blog') > 0"),
    "country = DE": ((Filter("country", "==", "DE"),), " AND country = 'DE'"),
    "3 filters": ((Filter("country", "==", "DE"), Filter("page", "~=", "/blog"), Filter("browser", "==", "Chrome")),
                  " AND country = 'DE' AND strpos(lower(path), '/blog') > 0 AND browser = 'Chrome'"),
}


async def pg_overview(conn: asyncpg.Connection, start: datetime, end: datetime, extra: str,
                      unit: str = "day") -> list:
    """The overview's numbers as plain SQL on events (what the engine replaces), the series by `unit`."""
    scope = "site_id = $1 AND ts >= $2 AND ts < $3" + extra
    args = (SITE.id, start, end)
    out = [await conn.fetchrow(f"SELECT count(*), count(*) FILTER (WHERE name = 'pageview'), "
                               f"count(DISTINCT ip_hash) FROM events WHERE {scope}", *args)]
    out.append(await conn.fetchrow(
        "WITH s AS (SELECT session_id, min(ts) AS first, max(ts) AS last, count(*) FILTER (WHERE name = 'pageview') "
        "AS pv FROM events WHERE site_id = $1 AND ts >= $2::timestamptz - interval '1 day' AND ts < $3 "
        "GROUP BY session_id HAVING min(ts) >= $2) SELECT count(*), count(*) FILTER (WHERE pv = 1), "
        "avg(extract(epoch FROM last - first)) FROM s "
        f"WHERE session_id IN (SELECT session_id FROM events WHERE {scope})", *args))
    for column in ("path", "referrer", "country"):
        out.append(await conn.fetch(f"SELECT {column}, count(*) AS c FROM events WHERE {scope} AND name = 'pageview' "
                                    f"AND {column} <> '' GROUP BY 1 ORDER BY c DESC LIMIT 20", *args))
    out.append(await conn.fetch(f"SELECT date_trunc('{unit}', ts, 'UTC'), count(*) FROM events WHERE {scope} "
                                "AND name = 'pageview' GROUP BY 1", *args))
    return out


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def timed(fn) -> float:
    started = time.perf_counter()
    await fn()
    return (time.perf_counter() - started) * 1000


async def generate(conn: asyncpg.Connection, total: int, now: datetime, days: int = 30,
                   engagement: bool = False) -> None:
    ws = await ensure_workspace(conn, "bench")
    await conn.execute("INSERT INTO sites (id, workspace_id, domain, verification_token) VALUES ($1, $2, $3, 't') "
                       "ON CONFLICT DO NOTHING", SITE.id, ws, SITE.domain)
    await ensure_partitions(conn, {now - timedelta(days=d) for d in range(0, days + 5, 5)} | {now})
    await conn.execute("ALTER TABLE events DISABLE TRIGGER USER")
    started = time.perf_counter()
    for lo in range(0, total, CHUNK):
        await conn.execute(GENERATE, ws, now, timedelta(days=days), max(1, total // 5), lo, min(total, lo + CHUNK) - 1)
        print(f"  generated {min(total, lo + CHUNK):,} events", file=sys.stderr)
    if engagement:
        status = await conn.execute(ENGAGEMENT)
        print(f"  generated {int(status.split()[-1]):,} engagement events", file=sys.stderr)
    await conn.execute("ALTER TABLE events ENABLE TRIGGER USER")
    await conn.execute("VACUUM ANALYZE events")
    print(f"generated {total:,} events in SQL in {time.perf_counter() - started:.0f} s", file=sys.stderr)


async def engaged_pages(db, w, filters: store.Filters, limit: int) -> list[dict]:
    rows = await analytics_breakdown.breakdown(db, SITE.id, w.start, w.end, prop="page", goals=list(filters.goals),
                                               limit=limit, offset=0, filters=filters, metrics=("visitors",))
    await with_engagement(db, SITE.id, w, filters, rows)
    return rows


async def sizes(conn: asyncpg.Connection, db, total: int) -> list[str]:
    pg_all = await conn.fetchval("SELECT sum(pg_total_relation_size(c.oid)) FROM pg_inherits i "
                                 "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass")
    pg_heap = await conn.fetchval("SELECT sum(pg_table_size(c.oid)) FROM pg_inherits i "
                                  "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'events'::regclass")
    ch, sessions, days = [(await db.query("SELECT sum(bytes_on_disk), sum(data_uncompressed_bytes) FROM system.parts "
                                          "WHERE database = {d:String} AND table = {t:String} AND active",
                                          {"d": db.database, "t": t}))[0]
                          for t in ("site_events", "site_sessions", "site_days")]
    counts, engagement = [(await db.query("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {d:String} "
                                          "AND table = {t:String} AND active", {"d": db.database, "t": t}))[0][0] or 0
                          for t in ("site_day_counts", "site_engagement")]
    return ["| store | bytes on disk | bytes per event |", "|---|---:|---:|",
            f"| PostgreSQL events (heap + TOAST) | {pg_heap:,} | {pg_heap / total:.0f} |",
            f"| PostgreSQL events (with its indexes) | {pg_all:,} | {pg_all / total:.0f} |",
            f"| ClickHouse site_events (compressed) | {ch[0]:,} | {ch[0] / total:.1f} |",
            f"| ClickHouse site_events (uncompressed) | {ch[1]:,} | {ch[1] / total:.0f} |",
            f"| ClickHouse site_sessions (compressed) | {sessions[0]:,} | {sessions[0] / total:.1f} |",
            f"| ClickHouse site_days (compressed) | {days[0] or 0:,} | {(days[0] or 0) / total:.2f} |",
            f"| ClickHouse site_day_counts (compressed) | {counts:,} | {counts / total:.2f} |",
            f"| ClickHouse site_engagement (compressed; --engagement) | {engagement:,} | {engagement / total:.1f} |"]


def target_ms(label: str) -> int | None:
    """Issue 11's p50 target for a row, if it sets one: the unfiltered 30-day overview, the overview under 1-3
    filters, and top lists, breakdowns and daily series under filters, in any time zone."""
    label = label.split(", in ")[0]
    if label == "overview, unfiltered":
        return 100
    if label.startswith("overview, "):
        return 300
    if label.startswith(("top pages, ", "daily series, ")) or (label.startswith("breakdown by") and "filter" in label):
        return 60
    return None


def range_of(days: int) -> str:
    """The dashboard's range over the days generated: 30d, 90d, or the last 12 months for a year."""
    return "12mo" if days == 365 else f"{days}d"


def zone_reads(db, days: int, zone: str) -> dict[str, tuple]:
    """The overviews, the /blog daily series and the browser breakdown of the same site in another time zone:
    its window of days starts and ends inside UTC days, and its days are not the day rows' UTC days."""
    site, w = dataclasses.replace(SITE, time_zone=zone), window_for(range_of(days), time_zone=zone)
    first, last = w.buckets("day")
    out: dict[str, tuple] = {}
    for label, (terms, _) in CASES.items():
        filters = store.Filters(extra=terms)
        out[f"overview, {label}, in {zone}"] = (lambda f=filters: overview_body(db, site, w, f), None)
    de, blog = CASES["country = DE"], CASES["path contains /blog"]
    out[f"daily series, path contains /blog, in {zone}"] = (
        lambda: analytics_lists.series(db, SITE.id, w.start, w.end, name="pageview", interval="day", first=first,
                                       last=last, filters=store.Filters(extra=blog[0]), time_zone=zone), None)
    out[f"breakdown by browser, 2 filters, in {zone}"] = (
        lambda: analytics_breakdown.breakdown(db, SITE.id, w.start, w.end, prop="browser", goals=[], limit=20,
                                              offset=0, filters=store.Filters(extra=(*de[0], *blog[0]))), None)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=30, choices=(30, 90, 365),
                        help="the range generated and read (365: the last 12 months, range=12mo)")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--pg-runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--time-zone", help="also time the overviews, the daily series and the browser breakdown "
                                            "of a site in this zone (its windows run from its midnights), same run")
    parser.add_argument("--engagement", action="store_true",
                        help="also one engagement event per pageview, and time the page breakdowns with scroll depth "
                             "and time on page beside the same breakdowns without")
    args = parser.parse_args()
    name = f"tally_bench_analytics_{secrets.token_hex(3)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    now = datetime.now(UTC)
    db = None
    store_dir = Path(tempfile.mkdtemp(prefix="tally-bench-ch-"))
    try:
        conn = await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})
        await init_connection(conn)
        await migrate(conn)
        await generate(conn, args.events, now, args.days, args.engagement)
        # The store's default bounds (1 GiB per query), for the rebuild as for the timed reads.
        db = await asyncio.to_thread(open_store, url=None, path=store_dir, database="bench")
        started = time.perf_counter()
        written = await rebuild(conn, db)
        rebuild_s = time.perf_counter() - started
        print(f"rebuild: {written:,} events in {rebuild_s:.0f} s ({written / rebuild_s:,.0f} events/s)",
              file=sys.stderr)
        # As background merges leave them in a while.
        for merged in ("site_events", "site_sessions", "site_days", "site_engagement"):
            await db.command(f"OPTIMIZE TABLE bench.{merged} FINAL")

        w = window_for(range_of(args.days))
        first, last = w.buckets("day")
        results: dict[str, tuple[list, list]] = {}
        for label, (terms, pg_extra) in CASES.items():
            filters = store.Filters(extra=terms)
            results[f"overview, {label}"] = (
                lambda f=filters: overview_body(db, SITE, w, f),
                lambda e=pg_extra: pg_overview(conn, w.start, w.end, e))
        if args.time_zone:
            results.update(zone_reads(db, args.days, args.time_zone))
        # The dashboard's default range: 7 days by the hour, a window that starts inside its first day.
        week = window_for("7d")
        results["7-day overview (hourly), unfiltered"] = (
            lambda: overview_body(db, SITE, week, store.Filters()),
            lambda: pg_overview(conn, week.start, week.end, "", unit="hour"))
        de, blog = CASES["country = DE"], CASES["path contains /blog"]
        results["top pages, country = DE"] = (
            lambda: analytics_lists.top(db, SITE.id, w.start, w.end, dim="p", name="pageview", domain=SITE.domain,
                                        limit=20, filters=store.Filters(extra=de[0])),
            lambda: conn.fetch("SELECT path, count(*) AS c FROM events WHERE site_id = $1 AND ts >= $2 AND ts < $3"
                               f"{de[1]} AND name = 'pageview' GROUP BY 1 ORDER BY c DESC LIMIT 20",
                               SITE.id, w.start, w.end))
        results["daily series, path contains /blog"] = (
            lambda: analytics_lists.series(db, SITE.id, w.start, w.end, name="pageview", interval="day",
                                           first=first, last=last, filters=store.Filters(extra=blog[0])),
            lambda: conn.fetch("SELECT date_trunc('day', ts, 'UTC'), count(*) FROM events WHERE site_id = $1 "
                               f"AND ts >= $2 AND ts < $3{blog[1]} AND name = 'pageview' GROUP BY 1",
                               SITE.id, w.start, w.end))
        results["breakdown by browser, 2 filters"] = (
            lambda: analytics_breakdown.breakdown(db, SITE.id, w.start, w.end, prop="browser", goals=[], limit=20,
                                                  offset=0, filters=store.Filters(extra=(*de[0], *blog[0]))),
            lambda: conn.fetch("SELECT browser, count(DISTINCT ip_hash), count(DISTINCT session_id), count(*) "
                               "FROM events WHERE site_id = $1 AND ts >= $2 AND ts < $3"
                               f"{de[1]}{blog[1]} GROUP BY 1", SITE.id, w.start, w.end))
        # Every breakdown the API offers (storage.site_filters.DIMENSIONS but `event`, and `props:<key>`), under
        # three filters, with the metrics the dashboard's panels ask for (visitors); a few with every metric.
        three = CASES["3 filters"][0]
        goals = [store.Goal("click", "click", None), store.Goal("Visit /blog/**", None, "/blog/**")]
        for prop in [*(d for d in DIMENSIONS if d != "event"), "props:plan"]:
            for metrics in (("visitors",), METRICS) if prop in ("page", "entry_page", "source") else (("visitors",),):
                label = f"breakdown by {prop}, 3 filters{', every metric' if len(metrics) > 1 else ''}"
                results[label] = (
                    lambda p=prop, m=metrics: analytics_breakdown.breakdown(
                        db, SITE.id, w.start, w.end, prop=p, goals=goals, limit=20, offset=0,
                        filters=store.Filters(extra=three, goals=tuple(goals)), metrics=m),
                    None)
        # A breakdown under three filters none of which is in site_events' sorting key (country and browser
        # are): it scans every granule of the window, as every read did before that key.
        outside = (Filter("device", "==", "mobile"), Filter("page", "~=", "/blog"), Filter("source", "==", "Google"))
        results["breakdown by page, 3 filters outside the sorting key"] = (
            lambda: analytics_breakdown.breakdown(db, SITE.id, w.start, w.end, prop="page", goals=goals, limit=20,
                                                  offset=0, filters=store.Filters(extra=outside),
                                                  metrics=("visitors",)),
            None)
        # What the dashboard asks for when it opens, all at once as the page does (app/static/js/panels.js): the
        # overview, the first tab of each breakdown panel, unfiltered (visitors), the Locations panel's check for
        # region and city values, and the goals with their conversions.
        for label, window in (("dashboard opening, 7 days: overview, 5 breakdowns and a check at once", week),
                              (f"dashboard opening, {args.days} days: overview, 5 breakdowns and a check at once", w)):
            results[label] = (lambda window=window: asyncio.gather(
                overview_body(db, SITE, window, store.Filters()),
                analytics_breakdown.have_values(db, SITE.id, window.start, window.end, props=["region", "city"],
                                                filters=store.Filters()),
                *(analytics_breakdown.breakdown(db, SITE.id, window.start, window.end, prop=prop, goals=goals,
                                                limit=limit, offset=0, filters=store.Filters(goals=tuple(goals)),
                                                metrics=metrics)
                  for prop, limit, metrics in (("channel", 10, ("visitors",)), ("page", 10, ("visitors",)),
                                               ("country", 10, ("visitors",)), ("browser", 10, ("visitors",)),
                                               ("goal", 100, ("visitors", "events", "conversion_rate"))))), None)
        # Each panel's read of the opening alone, once the opening has made its states (the first call of the
        # opening's row above makes them, as the day's first opening does without the warmer).
        for prop, limit, metrics in (("channel", 10, ("visitors",)), ("page", 10, ("visitors",)),
                                     ("country", 10, ("visitors",)), ("browser", 10, ("visitors",)),
                                     ("goal", 100, ("visitors", "events", "conversion_rate"))):
            results[f"dashboard panel: breakdown by {prop}, unfiltered"] = (
                lambda p=prop, n=limit, m=metrics: analytics_breakdown.breakdown(
                    db, SITE.id, w.start, w.end, prop=p, goals=goals, limit=n, offset=0,
                    filters=store.Filters(goals=tuple(goals)), metrics=m), None)
        # Plausible's Stats API's time dimensions (app/views/stats_api.py): visitors alone from the day sets
        # (site_days), and the same from the events, as a site in another zone (Etc/UTC, the same days) reads them.
        for prop, metrics, zone in (("time:day", ("visitors",), "UTC"), ("time:day", ("visitors",), "Etc/UTC"),
                                    ("time:month", ("visitors",), "UTC"), ("time:month", ("visitors",), "Etc/UTC"),
                                    ("time:month", ("visitors", "pageviews"), "UTC")):
            source = "day sets" if zone == "UTC" and metrics == ("visitors",) else "events"
            results[f"Stats API: {prop}, {' and '.join(metrics)}, unfiltered, from the {source}"] = (
                lambda p=prop, m=metrics, z=zone: analytics_breakdown.breakdown(
                    db, SITE.id, w.start, w.end, prop=p, goals=[], limit=10_000, offset=0, filters=store.Filters(),
                    metrics=m, time_zone=z), None)
        if args.engagement:  # the page breakdowns as the view reads them with metrics=...,scroll_depth,time_on_page
            for label, limit, extra in (
                    ("dashboard panel: Top pages with time on page and scroll depth, unfiltered", 10, ()),
                    ("breakdown by page, 3 filters, with time on page and scroll depth", 20, three)):
                chosen = store.Filters(extra=extra, goals=tuple(goals))
                results[label] = (lambda n=limit, f=chosen: engaged_pages(db, w, f, n), None)
        # The first call is timed apart: it warms the caches, and an unfiltered overview counts the ended days
        # there (storage/analytics_days.py), once per day.
        table = [f"| {args.days}-day query | ClickHouse (chDB) p50 / p99 ms | first call ms | "
                 "PostgreSQL p50 / p99 ms | ratio (p50) | issue 11 target at 10M events (p50) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for label, (engine, pg) in results.items():
            first_ms = await timed(engine)
            ch_ms, pg_ms = [], []
            for i in range(args.runs):
                ch_ms.append(await timed(engine))
                if pg is not None and i < args.pg_runs:
                    pg_ms.append(await timed(pg))
            head = f"| {label} | {pct(ch_ms, .5):.0f} / {pct(ch_ms, .99):.0f} | {first_ms:.0f} |"
            goal = target_ms(label) if args.days == 30 else None  # issue 11 set targets for 30 days only
            verdict = f" < {goal}: {'met' if pct(ch_ms, .5) < goal else 'missed'} |" if goal else " |"
            if pg_ms:
                table.append(f"{head} {pct(pg_ms, .5):.0f} / {pct(pg_ms, .99):.0f} | "
                             f"{pct(pg_ms, .5) / pct(ch_ms, .5):.0f}x |{verdict}")
            else:
                table.append(f"{head} | |{verdict}")
            print(table[-1], file=sys.stderr)
        size_table = await sizes(conn, db, args.events)
        await conn.close()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\n{args.events:,} site events over {args.days} days; {args.runs} engine runs, {args.pg_runs} "
              "PostgreSQL runs per query, interleaved\n")
        print("\n".join(table))
        print()
        print("\n".join(size_table))
        print(f"\nrebuild from PostgreSQL: {written / rebuild_s:,.0f} events/s; peak RSS of this process "
              f"(chDB in process): {rss:,.0f} MB")
    finally:
        if db is not None:
            db.close()
        if args.keep:
            print(f"kept: PostgreSQL database {name}, analytics store {store_dir} (database bench)")
        else:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            shutil.rmtree(store_dir, ignore_errors=True)
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
