"""Report benchmark: the built-in reports on the analytics engine (embedded ClickHouse) against the same
reports as they ran on PostgreSQL (bench/report_queries_postgres.py), on the same keyed events, one run.

    .venv/bin/python bench/reports.py [--events 10000000] [--users 50000] [--runs 5] [--pg-runs 2] [--keep]
        [--before FILE]

Creates a fresh database on the local PostgreSQL (BENCH_PG), generates the events in SQL with the events
triggers off (30 days, four event names, a `plan` property) and the users' traits, ANALYZEs, copies the
events into a fresh embedded store with `tally analytics rebuild`'s code, then times each report through
the runner the API uses (engine) and through the former PostgreSQL SQL, interleaved. `--before FILE` also
times the runner with storage/report_queries.py swapped for FILE (an older version, e.g. from `git show
REV:storage/report_queries.py > /tmp/before.py`), interleaved with the others, to compare engine SQL on one
data set in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import resource
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import report_queries_postgres as pgq  # noqa: E402

from app.reports import runner  # noqa: E402
from app.reports.runner import parse_group, run_report  # noqa: E402
from app.settings import Settings  # noqa: E402
from common.metrics import Metrics  # noqa: E402
from storage.analytics_mirror import rebuild  # noqa: E402
from storage.clickhouse import open_store  # noqa: E402
from storage.db import create_pool, init_connection  # noqa: E402
from storage.events import ensure_partitions  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
PLANS = ["free", "pro", "enterprise"]
CHUNK = 1_000_000
# view 60%, login 25%, signup 10%, purchase 5% (by g % 20); the user and the time by multiplicative hashes
# of g modulo two primes that are not multiples of 20, so that each user has events of every name at
# unrelated times (a hash modulo the number of users would give each user one name only: no funnel
# conversions and no retention returns to compute).
GENERATE = """
INSERT INTO events (id, workspace_id, env, site_id, name, user_id, properties, ts, received_at)
SELECT 'evt_' || g, $1, 'live', NULL,
       CASE WHEN g % 20 < 12 THEN 'view' WHEN g % 20 < 17 THEN 'login' WHEN g % 20 < 19 THEN 'signup'
            ELSE 'purchase' END,
       'u' || (((g * 7919) % 1000003) % $2),
       jsonb_build_object('plan', (ARRAY['free', 'pro', 'enterprise'])[1 + g % 3]),
       t, t
FROM (SELECT g, $3::timestamptz + interval '30 days' * ((g * 104729) % 999983)::float8 / 999983 AS t
      FROM generate_series($4::bigint, $5::bigint) AS g) s
"""


def reports(start: datetime, end: datetime) -> list[tuple[str, str, dict]]:
    window = {"from": start.isoformat(), "to": end.isoformat()}
    return [
        ("event_volume, 4 events, daily", "event_volume",
         {"events": ["view", "login", "signup", "purchase"], **window}),
        ("event_volume, hourly, by traits.plan", "event_volume",
         {"events": ["view", "purchase"], "interval": "hour", "group_by": "traits.plan", **window}),
        ("funnel, 3 steps, 7-day window", "funnel", {"events": ["view", "signup", "purchase"], **window}),
        ("funnel, 3 steps, by properties.plan", "funnel",
         {"events": ["view", "signup", "purchase"], "group_by": "properties.plan", **window}),
        ("retention, daily, 8 periods", "retention",
         {"start_event": "signup", "return_event": "login", **window}),
        ("retention, weekly, 4 periods", "retention",
         {"start_event": "signup", "return_event": "login", "period": "week", "periods": 4, **window}),
    ]


async def postgres_run(pool: asyncpg.Pool, ws: int, kind: str, config: dict, now: datetime) -> int:
    start, end = datetime.fromisoformat(config["from"]), datetime.fromisoformat(config["to"])
    async with pool.acquire() as conn, pgq.scoped_run(conn, 600_000):
        if kind == "event_volume":
            group_kind, path = parse_group(config.get("group_by"))
            rows = await pgq.event_volume(conn, ws, "live", events=config["events"], start=start, end=end,
                                          interval=config.get("interval", "day"), group_kind=group_kind,
                                          group_path=path)
        elif kind == "funnel":
            group_kind, path = parse_group(config.get("group_by"))
            rows = await pgq.funnel(conn, ws, "live", events=config["events"], start=start, end=end, window_days=7,
                                    group_kind=group_kind, group_path=path)
        else:
            rows = await pgq.retention(conn, ws, "live", start_event=config["start_event"],
                                       return_event=config["return_event"], start=start, end=end,
                                       period=config.get("period", "day"), periods=config.get("periods", 8), now=now)
    return len(rows)


async def load(conn: asyncpg.Connection, total: int, users: int, start: datetime) -> int:
    ws = await ensure_workspace(conn, "bench-reports")
    await ensure_partitions(conn, [start + timedelta(days=d) for d in range(0, 35, 5)])
    await conn.execute("ALTER TABLE events DISABLE TRIGGER USER")
    t0 = time.perf_counter()
    for lo in range(0, total, CHUNK):
        await conn.execute(GENERATE, ws, users, start, lo, min(total, lo + CHUNK) - 1)
    await conn.execute("ALTER TABLE events ENABLE TRIGGER USER")
    await conn.execute(
        "INSERT INTO user_profiles (workspace_id, env, user_id, traits, created_at) "
        "SELECT $1, 'live', 'u' || i, jsonb_build_object('plan', (ARRAY['free', 'pro', 'enterprise'])[1 + i % 3]), $3 "
        "FROM generate_series(0, $2 - 1) AS i", ws, users, start)
    await conn.execute("VACUUM ANALYZE events")
    await conn.execute("ANALYZE user_profiles")
    print(f"generated {total:,} events for {users:,} users in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return ws


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pg-runs", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--before", type=Path, help="an older storage/report_queries.py to time as well")
    args = parser.parse_args()
    before = None
    if args.before:
        spec = importlib.util.spec_from_file_location("report_queries_before", args.before)
        before = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = before  # dataclasses look their module up
        spec.loader.exec_module(before)

    name = f"tally_bench_reports_{secrets.token_hex(3)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    now = datetime.now(UTC)
    end = now.replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=30)
    db = None
    store_dir = Path(tempfile.mkdtemp(prefix="tally-bench-ch-"))
    try:
        conn = await asyncpg.connect(dsn)
        await init_connection(conn)
        await migrate(conn)
        ws = await load(conn, args.events, args.users, start)
        db = await asyncio.to_thread(open_store, url=None, path=store_dir, database="bench")
        t0 = time.perf_counter()
        written = await rebuild(conn, db)
        print(f"rebuild: {written:,} events in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        await db.command("OPTIMIZE TABLE bench.keyed_events FINAL")
        await conn.close()
        pool = await create_pool(dsn, min_size=1, max_size=2)
        settings = Settings(database_url=dsn, report_timeout_seconds=600, custom_sql_timeout_seconds=600)
        metrics = Metrics()
        current = runner.q

        async def engine_run(kind: str, config: dict, queries: object) -> list:
            runner.q = queries  # the runner's report SQL: this branch's, or the --before file's
            try:
                result = await run_report(pool, settings, metrics, workspace_id=ws, env="live", plan="enterprise",
                                          report_type=kind, config=config, analytics=db)
            finally:
                runner.q = current
            return result.rows

        head = "| report | rows | engine p50 ms | engine min ms |"
        rule = "|---|---:|---:|---:|"
        if before is not None:
            head += " before p50 ms | before min ms | before / engine (p50) |"
            rule += "---:|---:|---:|"
        lines = [head + " PostgreSQL p50 ms | ratio (p50) |", rule + "---:|---:|"]
        for label, kind, config in reports(start, end):
            engine, old, postgres, rows = [], [], [], []
            for queries in (current, before) if before is not None else (current,):
                await engine_run(kind, config, queries)  # warm-up, untimed: both start from warm caches
            for i in range(args.runs):
                t0 = time.perf_counter()
                rows = await engine_run(kind, config, current)
                engine.append((time.perf_counter() - t0) * 1000)
                if before is not None:
                    t0 = time.perf_counter()
                    old_rows = await engine_run(kind, config, before)
                    old.append((time.perf_counter() - t0) * 1000)
                    assert old_rows == rows, (label, old_rows[:5], rows[:5])  # the same answer
                if i < args.pg_runs:
                    t0 = time.perf_counter()
                    await postgres_run(pool, ws, kind, config, now)
                    postgres.append((time.perf_counter() - t0) * 1000)
            e = statistics.median(engine)
            line = f"| {label} | {len(rows)} | {e:.0f} | {min(engine):.0f} |"
            if before is not None:
                o = statistics.median(old)
                line += f" {o:.0f} | {min(old):.0f} | {o / e:.1f}x |"
            if postgres:  # --pg-runs 0 times the engine alone
                p = statistics.median(postgres)
                lines.append(line + f" {p:.0f} | {p / e:.0f}x |")
            else:
                lines.append(line + " - | - |")
            print(lines[-1], file=sys.stderr)
        await pool.close()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\n{args.events:,} events, {args.users:,} users, 30 days; engine {args.runs} runs"
              f"{f' (and {args.before})' if before else ''}, PostgreSQL {args.pg_runs} runs, interleaved\n")
        print("\n".join(lines))
        print(f"\npeak RSS of this process (chDB in process): {rss:,.0f} MB")
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
