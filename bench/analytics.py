"""Site analytics read benchmark: 1,000,000 site events, rollups against raw events, one run.

    .venv/bin/python bench/analytics.py [--events 1000000] [--runs 40] [--raw-runs 5] [--keep]

DATABASE_URL (default: a fresh database on the local PostgreSQL, dropped at the end) gets the
migrations, one site and the events, loaded with COPY through the production triggers (which derive
the rollups and the sessions). Then, per range (24h, 7d, 30d), it times:

- the storage path the views use (app.views.analytics.overview_body and the same series/top calls),
  once with rollups and the 0004 indexes and once on raw events only, inside a transaction that has
  dropped the index 0004 adds (rolled back afterwards), so the baseline has only the core indexes;
- the real HTTP app (GET /api/analytics/overview with a dashboard session, in-process client).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import random
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import asyncpg
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.dashboard_session import hash_password  # noqa: E402
from app.server import init_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.views.analytics import _series, overview_body  # noqa: E402
from app.views.analytics_params import Site, window_for  # noqa: E402
from storage import accounts  # noqa: E402
from storage import analytics as store  # noqa: E402
from storage.db import init_connection  # noqa: E402
from storage.events import EventRow, copy_events, ensure_partitions  # noqa: E402
from storage.ids import new_id  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
SPAN = timedelta(days=30)
RANGES = ["24h", "7d", "30d"]
CHUNK = 50_000


def build_data(site_id: str, workspace_id: int, total: int, now: datetime, seed: int = 7):
    """Sessions spread uniformly over the last 30 days, ~5 events each (first one a pageview)."""
    rnd = random.Random(seed)
    paths = [f"/docs/{i}" if i % 3 else f"/blog/post-{i}" for i in range(300)]
    cumulative = list(itertools.accumulate(1 / (i + 1) for i in range(300)))  # Zipf-like popularity
    referrers = ["", "", "", "https://www.google.com/", "https://news.ycombinator.com/item?id=1",
                 *(f"https://ref{i}.example/x" for i in range(40))]
    countries = ["US", "DE", "FR", "GB", "IN", "BR", "JP", "CA", "NL", "SE", *(f"C{i}" for i in range(20))]
    visitors = [secrets.token_hex(8) for _ in range(60_000)]
    events, sessions = [], []
    while len(events) < total:
        sid = new_id("ses")
        start = now - SPAN * rnd.random()
        visitor, country, referrer = rnd.choice(visitors), rnd.choice(countries), rnd.choice(referrers)
        n = min(total - len(events), 1 + min(int(rnd.expovariate(0.25)), 30))
        ts, pageviews, path = start, 0, "/"
        for i in range(n):
            name = "pageview" if i == 0 or rnd.random() < 0.8 else rnd.choice(["outbound", "signup", "click"])
            if name == "pageview":
                path = rnd.choices(paths, cum_weights=cumulative)[0]
                pageviews += 1
            events.append(EventRow(new_id("evt"), workspace_id, "live", name, ts, ts, site_id=site_id, session_id=sid,
                                   properties={"plan": "pro"} if name == "signup" else None,
                                   url=f"https://bench.example{path}", path=path, referrer=referrer, title="Title",
                                   viewport_w=1280, country=country, ip_hash=visitor))
            ts = min(ts + timedelta(seconds=rnd.randint(5, 180)), now)
        sessions.append((site_id, sid, start, ts, pageviews, n, None, None, referrer or None, country))
    return events, sessions


async def load(conn: asyncpg.Connection, total: int) -> Site:
    workspace_id = await ensure_workspace(conn, "bench")
    site = Site("bench-site", "bench.example")
    await conn.execute("INSERT INTO sites (id, workspace_id, domain, verification_token) VALUES ($1, $2, $3, 't') "
                       "ON CONFLICT DO NOTHING", site.id, workspace_id, site.domain)
    now = datetime.now(UTC)
    started = time.perf_counter()
    events, sessions = build_data(site.id, workspace_id, total, now)
    print(f"generated {len(events):,} events, {len(sessions):,} sessions in {time.perf_counter() - started:.1f}s")
    await ensure_partitions(conn, {now - SPAN + timedelta(days=d) for d in range(0, 32, 5)} | {now})
    started = time.perf_counter()
    for i in range(0, len(events), CHUNK):
        await copy_events(conn, events[i:i + CHUNK])  # one COPY per chunk; the triggers make rollups and sessions
    print(f"loaded with COPY (rollup and session triggers on) in {time.perf_counter() - started:.1f}s")
    await conn.execute("VACUUM ANALYZE")
    return site


async def trigger_cost(conn: asyncpg.Connection, site: Site, rows: int = 50_000) -> tuple[float, float]:
    """Seconds to COPY `rows` more site events with and without the site triggers (both rolled back)."""
    workspace_id = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site.id)
    events, _ = build_data(site.id, workspace_id, rows, datetime.now(UTC), seed=11)
    out = []
    for trigger in (True, False):
        tx = conn.transaction()
        await tx.start()
        try:
            if not trigger:
                await conn.execute("ALTER TABLE events DISABLE TRIGGER events_site_rollup")
                await conn.execute("ALTER TABLE events DISABLE TRIGGER events_site_sessions")
            started = time.perf_counter()
            await copy_events(conn, events)
            out.append(time.perf_counter() - started)
        finally:
            await tx.rollback()
    return out[0], out[1]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def timed(fn, runs: int) -> list[float]:
    await fn()  # warm the plan cache
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def queries(conn: asyncpg.Connection, site: Site, range_name: str, rollups: bool) -> dict:
    w = window_for(range_name)
    none = store.Filters()
    grain = w.grain if rollups else None
    return {
        "overview": lambda: overview_body(conn, site, w, none, rollups=rollups),
        "timeseries": lambda: _series(conn, site.id, w, w.unit, "pageview", none, rollups=rollups),
        "top-pages": lambda: store.top(conn, site.id, w.start, w.end, dim="p", name="pageview", domain=site.domain,
                                       limit=20, grain=grain, filters=none),
    }


async def bench_storage(conn: asyncpg.Connection, site: Site, runs: int, raw_runs: int) -> dict:
    results = {}
    for range_name in RANGES:
        for name, fn in queries(conn, site, range_name, True).items():
            results[(name, range_name, "rollups")] = await timed(fn, runs)
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("DROP INDEX events_site_name_ts")  # baseline: core indexes only
        for range_name in RANGES:
            for name, fn in queries(conn, site, range_name, False).items():
                results[(name, range_name, "raw")] = await timed(fn, raw_runs)
        raw = {r: await overview_body(conn, site, window_for(r), store.Filters(), rollups=False) for r in RANGES}
    finally:
        await tx.rollback()
    for r in RANGES:  # the two paths must agree
        assert raw[r] == await overview_body(conn, site, window_for(r), store.Filters()), f"mismatch in {r}"
    return results


async def bench_http(dsn: str, site: Site, runs: int) -> dict:
    settings = Settings(database_url=dsn, secret="bench-" + "x" * 32, data_dir=Path(tempfile.mkdtemp()),
                        run_scheduler=False, access_log=False)
    conn = await asyncpg.connect(dsn)
    try:
        await accounts.upsert_account(conn, "bench@example.com", hash_password("bench password"), "bench")
    finally:
        await conn.close()
    runner = web.AppRunner(init_app(settings), access_log=None)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]
    results = {}
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            resp = await http.post("/api/auth/login", json={"email": "bench@example.com", "password": "bench password"})
            assert resp.status == 200, await resp.text()
            for range_name in RANGES:
                async def get(r=range_name):
                    async with http.get("/api/analytics/overview", params={"siteId": site.id, "range": r}) as resp:
                        assert resp.status == 200, await resp.text()
                        await resp.read()
                results[("overview (HTTP)", range_name, "rollups")] = await timed(get, runs)
    finally:
        await runner.cleanup()
    return results


def table(results: dict) -> str:
    lines = ["| query | range | rollups p50 / p99 (ms) | raw events p50 / p99 (ms) |",
             "|---|---|---|---|"]
    names = list(dict.fromkeys(k[0] for k in results))
    for name in names:
        for r in RANGES:
            cells = []
            for mode in ("rollups", "raw"):
                s = results.get((name, r, mode))
                cells.append(f"{pct(s, 0.5):.1f} / {pct(s, 0.99):.1f}" if s else "-")
            lines.append(f"| {name} | {r} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--raw-runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database created for the run")
    parser.add_argument("--reuse", action="store_true", help="with DATABASE_URL: skip loading if the site has data")
    args = parser.parse_args()
    dsn, created = os.environ.get("DATABASE_URL"), None
    if not dsn:
        created = f"tally_bench_analytics_{secrets.token_hex(3)}"
        admin = await asyncpg.connect(ADMIN)
        await admin.execute(f'CREATE DATABASE "{created}"')
        await admin.close()
        dsn = urlparse(ADMIN)._replace(path=f"/{created}").geturl()
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        await migrate(conn)
        loaded = await conn.fetchval("SELECT count(*) FROM sessions WHERE site_id = 'bench-site'")
        if args.reuse and loaded:
            site = Site("bench-site", "bench.example")
            print("reusing the loaded site (its events were timed relative to the original load)")
        else:
            site = await load(conn, args.events)
        results = await bench_storage(conn, site, args.runs, args.raw_runs)
        results.update(await bench_http(dsn, site, args.runs))
        with_trigger, without = await trigger_cost(conn, site)  # last: its rolled-back rows leave dead tuples
        await conn.close()
        print(f"\n{args.events:,} site events; storage rows: {args.runs} runs with rollups, {args.raw_runs} raw\n")
        print(table(results))
        print(f"\nCOPY of 50,000 more site events: {with_trigger:.2f}s with the site triggers, "
              f"{without:.2f}s without ({with_trigger / without:.1f}x)")
    finally:
        if created and not args.keep:
            admin = await asyncpg.connect(ADMIN)
            await admin.execute(f'DROP DATABASE IF EXISTS "{created}" WITH (FORCE)')
            await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
