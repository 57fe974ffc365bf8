"""Realtime read benchmark: GET /api/analytics/realtime answered from the site actor's window.

    .venv/bin/python bench/realtime.py [--events 5000] [--requests 1000]

Creates and drops its own database on the local PostgreSQL (BENCH_PG). Sends the events through
POST /api/service/event from many visitors, then times the realtime read against GET /healthz (the
HTTP floor of the same in-process client) in the same run, with in-process state and with Redis
(REDIS_URL, default the local one).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import secrets
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import orjson
from aiohttp.test_utils import TestClient, TestServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.dashboard_session import hash_password  # noqa: E402
from app.server import init_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from storage import accounts  # noqa: E402
from storage.migrate import migrate  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PASSWORD = "benchmark password"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


async def timed(client: TestClient, path: str, n: int) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        async with client.get(path) as resp:
            await resp.read()
            assert resp.status == 200, resp.status
        samples.append((time.perf_counter() - started) * 1000)
    return percentile(samples, 0.5), percentile(samples, 0.99)


async def run(settings: Settings, events: int, requests: int, window: int) -> list[tuple[str, float, float]]:
    client = TestClient(TestServer(init_app(settings)))
    await client.start_server()
    try:
        site = f"bench-{secrets.token_hex(4)}"
        for i in range(events):
            body = {"s": site, "n": "pageview" if i % 5 else "signup", "p": f"/page/{i % 40}"}
            resp = await client.post("/api/service/event", data=orjson.dumps(body),
                headers={"Content-Type": "text/plain", "X-Forwarded-For": f"198.51.100.{i % 250}",
                         "User-Agent": f"Mozilla/5.0 bench {i % 7}"})
            assert resp.status == 202
        login = await client.post("/api/auth/login", json={"email": "bench@example.com", "password": PASSWORD})
        assert login.status == 200
        realtime = await timed(client, f"/api/analytics/realtime?siteId={site}&window={window}", requests)
        floor = await timed(client, "/healthz", requests)
        return [("GET /api/analytics/realtime", *realtime), ("GET /healthz (HTTP floor)", *floor)]
    finally:
        await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--window", type=int, default=60, help="seconds; the API default is 60")
    args = parser.parse_args()
    name = f"tally_bench_rt_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(ADMIN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
        conn = await asyncpg.connect(dsn)
        await migrate(conn)
        # Sites auto-created in development belong to the "default" workspace.
        await accounts.upsert_account(conn, "bench@example.com", hash_password(PASSWORD), "default")
        await conn.close()
        base = Settings(database_url=dsn, secret="bench-" + "x" * 40, trusted_proxies=("127.0.0.1/32",),
                        site_events_per_min=0, ip_events_per_min=0, run_scheduler=False, access_log=False)
        rows = [("memory", *r) for r in await run(base, args.events, args.requests, args.window)]
        rows += [("redis", *r) for r in await run(dataclasses.replace(base, redis_url=REDIS), args.events,
                                                 args.requests, args.window)]
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    print(f"\n{args.events} site events, window={args.window}s, {args.requests} sequential requests each, "
          "in-process client\n")
    print(f"{'state':8} {'request':32} {'p50 ms':>8} {'p99 ms':>8}")
    for state, label, p50, p99 in rows:
        print(f"{state:8} {label:32} {p50:8.2f} {p99:8.2f}")


if __name__ == "__main__":
    asyncio.run(main())
