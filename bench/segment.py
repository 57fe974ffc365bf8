"""Segment API benchmark: POST /v1/batch with 100 Segment messages against Tally's own POST /v1/events/batch
with the same 100 events, in one run, interleaved rounds.

    .venv/bin/python bench/segment.py [--duration 10] [--connections 32] [--rounds 3]

Needs wrk and a PostgreSQL server (BENCH_PG, default the local one); creates and drops its own database.
Every request carries fresh messageIds (wrk builds each body), so the Segment path stores every message:
the numbers include the dedupe ledger's inserts, not skipped duplicates. The workspace runs on an enterprise
plan with limits far above the load.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import ADMIN, _admin, median_run, setup, start, wrk

from tests.server_process import free_port

# Each wrk thread numbers its requests; with the run nonce and the item index that makes every messageId new.
_COMMON = """
local threads = 0
function setup(thread) thread:set("tid", threads); threads = threads + 1 end
function init(args) n = 0 end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "%s"
"""
NATIVE_LUA = _COMMON + """
request = function()
  n = n + 1
  local items = {}
  for i = 1, %d do
    items[i] = '{"event":"page_viewed","user_id":"u' .. ((n * %d + i) %% 5000) ..
               '","properties":{"path":"/pricing","plan":"pro"},"timestamp":"%s"}'
  end
  return wrk.format(nil, nil, nil, '{"events":[' .. table.concat(items, ",") .. ']}')
end
"""
# What analytics-python sends: type, event, userId, properties, context.library, timestamp, messageId,
# integrations, and the batch's sentAt.
SEGMENT_LUA = _COMMON + """
request = function()
  n = n + 1
  local items = {}
  for i = 1, %d do
    items[i] = '{"type":"track","event":"Page Viewed","userId":"u' .. ((n * %d + i) %% 5000) ..
               '","properties":{"path":"/pricing","plan":"pro"},"timestamp":"%s",' ..
               '"context":{"library":{"name":"analytics-python","version":"2.4.0"}},"integrations":{},' ..
               '"messageId":"%s-' .. tid .. '-' .. n .. '-' .. i .. '"}'
  end
  return wrk.format(nil, nil, nil, '{"batch":[' .. table.concat(items, ",") .. '],"sentAt":"%s"}')
end
"""


def measured(url: str, script: str, duration: int, connections: int, pid: int) -> dict:
    """wrk's figures plus the Tally process's CPU time per request (its share of the machine's work)."""
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    result = wrk(url, script, duration, connections, pid)
    after = proc.cpu_times()
    spent = (after.user - before.user) + (after.system - before.system)
    result["cpu_ms"] = spent * 1000 / max(result["requests"], 1)
    return result


async def create_source(dsn: str, port: int) -> str:
    import aiohttp

    from app.keys import create_key
    from storage.db import init_connection

    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    _, key = await create_key(conn, workspace="bench", scopes=["admin"], test=False, name="admin", expires_at=None)
    await conn.close()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/v1/data-sources", headers={"Authorization": f"Bearer {key}"},
                             json={"name": "bench", "type": "segment", "credentials": {}}) as resp:
            assert resp.status == 201, await resp.text()
            return (await resp.json())["write_key"]


async def count_events(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT count(*) FROM events")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()

    name = f"tally_bench_{secrets.token_hex(4)}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    rounds: dict[str, list[dict]] = {"native": [], "segment": []}
    proc = None
    data_dir = tempfile.mkdtemp(prefix="tally-bench-data-")
    try:
        key = asyncio.run(setup(dsn))[0][0]  # a key of the workspace the Segment source is made in
        port = free_port()
        # A data folder of its own: the default (./.tally-data) would keep an analytics store tied to the
        # run's database, which a later run (another database) is refused.
        env = {"DATABASE_URL": dsn, "TALLY_ACCESS_LOG": "0", "TALLY_ENV": "development", "TALLY_DATA_DIR": data_dir}
        proc = start([sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)], env, port)
        write_key = asyncio.run(create_source(dsn, port))
        basic = "Basic " + base64.b64encode(f"{write_key}:".encode()).decode()
        stamp = "2026-11-26T08:00:00.000Z"
        native = NATIVE_LUA % (f"Bearer {key}", args.batch, args.batch, stamp)
        d, c = args.duration, args.connections
        for r in range(args.rounds):
            nonce = f"{secrets.token_hex(4)}{r}"
            segment = SEGMENT_LUA % (basic, args.batch, args.batch, stamp, nonce, stamp)
            # Alternate which goes first: the table grows and the machine drifts during a run.
            order = [("native", "/v1/events/batch", native), ("segment", "/v1/batch", segment)]
            for kind, path, script in order if r % 2 == 0 else order[::-1]:
                rounds[kind].append(measured(f"http://127.0.0.1:{port}{path}", script, d, c, proc.pid))
        stored = asyncio.run(count_events(dsn))
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        shutil.rmtree(data_dir, ignore_errors=True)

    acknowledged = sum((r["requests"] - r["non2xx"]) * args.batch for k in rounds for r in rounds[k])
    print(f"\nwrk -t2 -c{c} -d{d}s on loopback, {os.cpu_count()} cores; {args.batch} events per request; "
          f"{args.rounds} interleaved rounds, alternating which goes first")
    for i, (n, s) in enumerate(zip(rounds["native"], rounds["segment"], strict=True), 1):
        print(f"  round {i}: /v1/events/batch {n['rps']:6.0f} req/s p99 {n['p99']:6.1f} cpu {n['cpu_ms']:.2f} ms | "
              f"/v1/batch {s['rps']:6.0f} req/s p99 {s['p99']:6.1f} cpu {s['cpu_ms']:.2f} ms "
              f"({s['rps'] / n['rps']:.0%})")
    shares = sorted(s["rps"] / n["rps"] for n, s in zip(rounds["native"], rounds["segment"], strict=True))
    print(f"\n{'target':40} {'req/s':>8} {'events/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} "
          f"{'cpu ms/req':>10} {'vs native':>10}")
    for label, key_, versus in (("POST /v1/events/batch x100 (baseline)", "native", "100%"),
                                ("POST /v1/batch x100 Segment messages", "segment",
                                 f"{shares[len(shares) // 2]:.0%}")):
        r = median_run(rounds[key_])
        print(f"{label:40} {r['rps']:8.0f} {r['rps'] * args.batch:9.0f} {r['p50']:8.2f} {r['p99']:8.2f} "
              f"{r['non2xx']:8d} {r['cpu_ms']:10.2f} {versus:>10}")
    print("\ncpu ms/req: the Tally process's CPU time (user + system) per request, the rest of the work being "
          "wrk's and PostgreSQL's")
    print(f"rows: the median round; 'vs native' is the median of the per-round ratios. Events stored: {stored}, "
          f"acknowledged: {acknowledged} (requests in flight when wrk stopped were stored too)")


if __name__ == "__main__":
    main()
