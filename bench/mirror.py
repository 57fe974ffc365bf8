"""Analytics mirror cost per event: where a mirror round spends CPU, against the cost of storing the same
events in PostgreSQL, in one run.

    .venv/bin/python bench/mirror.py [--events 20000] [--rounds 5]

Creates and drops its own database on the local PostgreSQL (BENCH_PG) and a scratch embedded store. Each
round inserts N site events (sessions of 5 events, as bench/analytics.py generates them) with the events
triggers on, so the outbox lists them, then runs one mirror round's steps on them. CPU is read per step:
this process's event-loop thread, the whole process (chDB's threads included) and the PostgreSQL
backend. The baseline row is PostgreSQL's CPU for the INSERT that stored the events.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

from bench.analytics import GENERATE, SITE  # noqa: E402
from storage import analytics_mirror as mirror  # noqa: E402
from storage.clickhouse import open_store  # noqa: E402
from storage.db import init_connection  # noqa: E402
from storage.events import ensure_partitions  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """User + system CPU seconds of a PostgreSQL backend (same machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Meter:
    def __init__(self, pid: int) -> None:
        self.pid, self.totals = pid, {}
        self.last = self._now()

    def _now(self) -> tuple[float, float, float]:
        return time.thread_time(), time.process_time(), backend_cpu(self.pid)

    def mark(self, step: str) -> None:
        now = self._now()
        old = self.totals.get(step, (0.0, 0.0, 0.0))
        self.totals[step] = tuple(o + (a - b) for o, a, b in zip(old, now, self.last, strict=True))
        self.last = now


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    name = f"tally_bench_mirror_{secrets.token_hex(3)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    store_dir = Path(tempfile.mkdtemp(prefix="tally-bench-mirror-"))
    try:
        conn = await asyncpg.connect(urlparse(ADMIN)._replace(path=f"/{name}").geturl())
        await init_connection(conn)
        await migrate(conn)
        ws = await ensure_workspace(conn, "bench")
        await conn.execute("INSERT INTO sites (id, workspace_id, domain, verification_token) VALUES ($1, $2, $3, 't')",
                           SITE.id, ws, SITE.domain)
        now = datetime.now(UTC)
        await ensure_partitions(conn, {now - timedelta(days=d) for d in range(0, 35, 5)} | {now})
        store = open_store(url=None, path=store_dir, database="tally")
        meter = Meter(await conn.fetchval("SELECT pg_backend_pid()"))
        n = args.events
        for r in range(args.rounds):
            meter.mark("idle")
            await conn.execute(GENERATE, ws, now, timedelta(days=30), 1_000_000, r * n, (r + 1) * n - 1)
            meter.mark("store the events (baseline)")
            await conn.execute("SELECT pg_advisory_lock(7264002, 1)")
            async with conn.transaction(isolation="repeatable_read"):
                bound = await conn.fetchval(mirror._BOUND, n)
                meter.mark("round: bound the batch")
                data = await mirror.copy_events(conn, mirror._OUTBOX_EVENTS, bound)
                meter.mark("round: COPY the events out as CSV")
                await mirror.write_events(store, data)
                meter.mark("round: insert into ClickHouse")
                await conn.execute(mirror._DONE, bound)
                meter.mark("round: delete the outbox rows")
            await conn.execute("SELECT pg_advisory_unlock(7264002, 1)")
            meter.mark("round: commit")
        store.close()
        await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(store_dir, ignore_errors=True)
    total = args.events * args.rounds
    print(f"\n{args.rounds} rounds of {args.events:,} site events; CPU microseconds per event\n")
    print(f"{'step':38} {'event loop':>11} {'process':>9} {'PostgreSQL':>11}")
    rows = [(k, v) for k, v in meter.totals.items() if k != "idle"]
    for step, (loop, proc, pg) in rows:
        print(f"{step:38} {loop / total * 1e6:11.2f} {proc / total * 1e6:9.2f} {pg / total * 1e6:11.2f}")
    mirror_rows = [v for k, v in rows if k.startswith("round")]
    sums = [sum(v[i] for v in mirror_rows) / total * 1e6 for i in range(3)]
    print(f"{'mirror round, all steps':38} {sums[0]:11.2f} {sums[1]:9.2f} {sums[2]:11.2f}")
    base = meter.totals["store the events (baseline)"][2] / total * 1e6
    print(f"\nmirror (process + PostgreSQL) per event: {sums[1] + sums[2]:.1f} us, "
          f"{(sums[1] + sums[2]) / base:.0%} of PostgreSQL's cost of storing the event ({base:.1f} us)")


if __name__ == "__main__":
    asyncio.run(main())
