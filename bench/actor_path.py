"""The hand-off and the actors' flushes, in process: CPU of the event loop per event, real actors, real
PostgreSQL. 64 submitters each submit one event and await its commit, as request handlers do, so batches
form the way they do under `wrk -c64`; the HTTP side is left out (bench/request_path.py measures it).

    .venv/bin/python bench/actor_path.py [--events 60000] [--reps 3] [--tree DIR]

Needs a PostgreSQL server (BENCH_PG, as bench/ingest.py); creates and drops its own database. Reports CPU
microseconds of this thread per event (PostgreSQL runs in its own processes and is not counted), which moves
much less with other load than a rate. `--tree DIR` measures another checkout's actors, storage and pool
(e.g. `git worktree add --detach DIR REV`); run the trees alternately, the machine drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from datetime import UTC, datetime
from urllib.parse import urlparse

import asyncpg
import uvloop
from measured_tree import parse_args_with_tree  # bench/measured_tree.py

SUBMITTERS = 64


async def main(events: int, reps: int) -> None:
    # Imported here: --tree decides which checkout they come from.
    from actors.realtime import MemoryRealtime
    from actors.sessions import MemorySessions
    from actors.site import SITE_EVENTS, SiteActor, SiteItem
    from actors.workspace import EVENTS, PartitionCache, WorkspaceActor
    from bench.ingest import ADMIN, _admin
    from storage import db
    from storage.events import EventRow
    from storage.ids import new_id
    from storage.migrate import migrate

    name = f"tally_bench_actors_{secrets.token_hex(4)}"
    await _admin(f'CREATE DATABASE "{name}"')
    dsn = urlparse(ADMIN)._replace(path=f"/{name}").geturl()
    try:
        conn = await asyncpg.connect(dsn)
        await db.init_connection(conn)
        await migrate(conn)
        ws = await conn.fetchval("INSERT INTO workspaces (name) VALUES ('bench') RETURNING id")
        await conn.execute("INSERT INTO sites (id, workspace_id, domain, verification_token) "
                           "VALUES ('site_bench', $1, 'bench.example', 'x')", ws)
        await conn.close()
        # The actors' pool as app/server.py makes it (older trees: the shared pool).
        if hasattr(db, "create_writer_pool"):
            pool = await db.create_writer_pool(dsn, min_size=3, max_size=6)
        else:
            pool = await db.create_pool(dsn, min_size=3, max_size=10)
        tuning = {"max_batch": 5000, "capacity": 50_000, "linger": 0, "max_inflight": 3}
        partitions = PartitionCache()
        per = events // SUBMITTERS

        def keyed(i: int, j: int) -> list:
            now = datetime.now(UTC)
            return [EventRow(new_id("evt"), ws, "live", "page_viewed", now, now, user_id=f"u{(i * 64 + j) % 5000}",
                             properties={"path": "/pricing", "plan": "pro"})]

        def site(i: int, j: int) -> list:
            now = datetime.now(UTC)
            return [SiteItem(EventRow(
                new_id("evt"), ws, "live", "pageview", now, now, site_id="site_bench", properties={},
                url="https://bench.example/pricing", path="/pricing", referrer="https://news.example/",
                title="Pricing", viewport_w=1280, ip_hash="abcdef0123456789", browser="Chrome",
                browser_version="131", os="Windows", os_version="10", device="desktop", source="news.example",
                channel="Referral"), f"visitor{j}")]

        print(f"CPU microseconds of the event loop per event, {SUBMITTERS} submitters, {per * SUBMITTERS} events")
        for rep in range(reps):
            for label, kind, make in (("keyed", EVENTS, keyed), ("site", SITE_EVENTS, site)):
                if label == "keyed":
                    actor = WorkspaceActor(("ws", ws, "live"), pool, partitions, **tuning)
                else:
                    actor = SiteActor(("site", "site_bench"), pool, partitions, MemorySessions(), MemoryRealtime(),
                                      **tuning)
                actor.start()

                async def submitter(j: int, actor=actor, kind=kind, make=make) -> None:
                    for i in range(per):
                        await actor.submit(kind, make(i, j))

                cpu, wall = time.thread_time(), time.perf_counter()
                await asyncio.gather(*(submitter(j) for j in range(SUBMITTERS)))
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                await actor.stop()
                print(f"  round {rep + 1} {label:5} {cpu / (per * SUBMITTERS) * 1e6:6.1f} µs/event "
                      f"({per * SUBMITTERS / wall:6.0f} events/s)", flush=True)
        await pool.close()
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parse_args_with_tree(parser)
    uvloop.run(main(args.events, args.reps))
