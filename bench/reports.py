"""Report benchmark: every report type over 1,000,000 keyed events, timed through the runner the API uses.

    .venv/bin/python bench/reports.py [--events 1000000] [--users 50000] [--runs 5] [--keep]

Creates a fresh database on the local PostgreSQL (BENCH_PG, default postgres@127.0.0.1:5432), applies
the migrations, COPYs the events (30 days, four event names, a `plan` property) and user traits into one
workspace, ANALYZEs, then times each report `--runs` times and prints a Markdown table (median, min).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.reports.runner import run_report  # noqa: E402
from app.settings import Settings  # noqa: E402
from storage.db import create_pool, init_connection  # noqa: E402
from storage.events import EventRow, copy_events, ensure_partitions  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.users import merge_traits  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
NAMES = [("view", 0.6), ("login", 0.25), ("signup", 0.1), ("purchase", 0.05)]
PLANS = ["free", "pro", "enterprise"]
CHUNK = 50_000


def events(workspace_id: int, total: int, users: int, start: datetime, seed: int = 11):
    rnd = random.Random(seed)
    names, weights = zip(*NAMES, strict=True)
    span = 30 * 86_400
    for i in range(total):
        at = start + timedelta(seconds=rnd.random() * span)
        user = f"u{rnd.randrange(users)}"
        yield EventRow(f"evt_{i:010d}", workspace_id, "live", rnd.choices(names, weights)[0], at, at, user_id=user,
                       properties={"plan": rnd.choice(PLANS)})


def reports(start: datetime, end: datetime) -> list[tuple[str, str, dict]]:
    window = {"from": start.isoformat(), "to": end.isoformat()}
    return [
        ("event_volume, 4 events, daily", "event_volume",
         {"events": [n for n, _ in NAMES], **window}),
        ("event_volume, hourly, by traits.plan", "event_volume",
         {"events": ["view", "purchase"], "interval": "hour", "group_by": "traits.plan", **window}),
        ("funnel, 3 steps, 7-day window", "funnel", {"events": ["view", "signup", "purchase"], **window}),
        ("funnel, 3 steps, by properties.plan", "funnel",
         {"events": ["view", "signup", "purchase"], "group_by": "properties.plan", **window}),
        ("retention, daily, 8 periods", "retention",
         {"start_event": "signup", "return_event": "login", **window}),
        ("retention, weekly, 4 periods", "retention",
         {"start_event": "signup", "return_event": "login", "period": "week", "periods": 4, **window}),
        ("custom SQL, count by event", "custom",
         {"sql": "SELECT event, count(*) AS n, count(DISTINCT user_id) AS users FROM events GROUP BY event"}),
    ]


async def load(dsn: str, total: int, users: int, start: datetime) -> int:
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    try:
        await migrate(conn)
        ws = await ensure_workspace(conn, "bench-reports")
        await ensure_partitions(conn, [start + timedelta(days=d) for d in range(0, 32, 7)])
        t0 = time.perf_counter()
        batch = []
        for record in events(ws, total, users, start):
            batch.append(record)
            if len(batch) == CHUNK:
                await copy_events(conn, batch)
                batch = []
        if batch:
            await copy_events(conn, batch)
        traits = {f"u{i}": ({"plan": PLANS[i % 3]}, start) for i in range(users)}
        await merge_traits(conn, ws, "live", traits)
        await conn.execute("ANALYZE events; ANALYZE user_profiles")
        print(f"loaded {total:,} events for {users:,} users in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return ws
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    name = f"tally_bench_reports_{secrets.token_hex(3)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=30)
    try:
        ws = await load(dsn, args.events, args.users, start)
        pool = await create_pool(dsn, min_size=1, max_size=2)
        settings = Settings(database_url=dsn, report_timeout_seconds=300, custom_sql_timeout_seconds=300)
        print(f"\n{args.events:,} events, {args.users:,} users, 30 days; {args.runs} runs each\n")
        print("| report | rows | median ms | min ms |")
        print("|---|---:|---:|---:|")
        for label, kind, config in reports(start, end):
            times, rows = [], 0
            for _ in range(args.runs):
                t0 = time.perf_counter()
                result = await run_report(pool, settings, workspace_id=ws, env="live", plan="enterprise",
                                          report_type=kind, config=config)
                times.append((time.perf_counter() - t0) * 1000)
                rows = len(result.rows)
            print(f"| {label} | {rows} | {statistics.median(times):.0f} | {min(times):.0f} |")
        await pool.close()
    finally:
        if not args.keep:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
