"""The users' trait values a report grouped by a trait hands to the analytics store, at several numbers of
users with the trait: built by PostgreSQL (storage.report_queries.trait_index, as now) against a row per
user read into the process and built there (as before), in the same run on the same database.

    .venv/bin/python bench/trait_groups.py [--users 50000,1000000] [--runs 3]

For each size, a fresh database gets that many profiles (7 distinct values of `plan`), then each way is
timed `--runs` times: its wall time and the process's CPU time, which is the event loop's (everything in the
process runs on it; PostgreSQL's own work does not hold it). Prints a table of medians in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.clickhouse import Params
from storage.db import init_connection
from storage.migrate import migrate
from storage.report_queries import _SEP, trait_index
from storage.workspaces import ensure_workspace

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


async def in_the_process(conn: asyncpg.Connection, ws: int) -> None:
    """The way before: a row per user, numbered and joined here."""
    rows = await conn.fetch(
        "SELECT user_id, traits #>> $3::text[] AS v FROM user_profiles "
        "WHERE workspace_id = $1 AND env = $2 AND traits #>> $3::text[] IS NOT NULL", ws, "live", ["plan"])
    values = {r["user_id"]: r["v"] for r in rows}
    any(u.startswith("anon:") for u in values)
    labels = sorted(set(values.values()))
    number = {v: i + 1 for i, v in enumerate(labels)}
    b = Params()
    b(_SEP.join(values))
    b(",".join(str(number[v]) for v in values.values()))


async def in_postgresql(conn: asyncpg.Connection, ws: int) -> None:
    await trait_index(conn, Params(), ws, "live", ["plan"], anonymous_names=True)


async def timed(way: Callable[[asyncpg.Connection, int], Awaitable[None]], conn: asyncpg.Connection, ws: int,
                runs: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        await way(conn, ws)
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


async def size(users: int, runs: int) -> dict[str, tuple[float, float]]:
    name = f"tally_bench_traits_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}")
        await init_connection(conn)
        await migrate(conn)
        ws = await ensure_workspace(conn, "bench")
        await conn.execute(
            "INSERT INTO user_profiles (workspace_id, env, user_id, traits, created_at) SELECT $1, 'live', "
            "'user-' || md5(i::text), jsonb_build_object('plan', 'plan' || (i % 7)), now() "
            "FROM generate_series(1, $2) i", ws, users)
        await conn.execute("VACUUM ANALYZE user_profiles")
        out = {}
        for label, way in (("rows into the process (before)", in_the_process), ("built by PostgreSQL", in_postgresql)):
            await way(conn, ws)  # warm the cache
            out[label] = await timed(way, conn, ws, runs)
        await conn.close()
        return out
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="50000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"\n{'users':>9}  {'way':32} {'wall ms':>8} {'event loop ms':>14}")
    for users in (int(n) for n in args.users.split(",")):
        for label, (wall, cpu) in (await size(users, args.runs)).items():
            print(f"{users:>9,}  {label:32} {wall:8.0f} {cpu:14.0f}")


if __name__ == "__main__":
    asyncio.run(main())
