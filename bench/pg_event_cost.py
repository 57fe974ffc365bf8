"""PostgreSQL's CPU per stored event, the way the actors store them (one COPY per batch, the events
triggers firing), under schema variants, each in a fresh database, in one run.

    .venv/bin/python bench/pg_event_cost.py [--batches 3000] [--batch 32] [--variant NAME ...]

Keyed batches are `bench/ingest.py`'s single events: narrow rows (the 11 leading columns), users drawn at
random among 5,000, so after the first seconds every event updates an existing profile. Site batches are
the site endpoint's rows (every column). The backend's CPU is read from /proc (same machine); warm-up
batches (a tenth) are not counted. A variant is SQL run after the migrations; `as-is` runs none. WAL bytes
are the database cluster's while the batches (and the mirror's outbox side, every --mirror-every batches)
ran: other databases' writes count too, so run it on an otherwise quiet server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.mirror import backend_cpu  # noqa: E402
from storage import analytics_mirror as mirror  # noqa: E402
from storage.db import init_connection  # noqa: E402
from storage.events import EventRow, copy_events  # noqa: E402
from storage.ids import new_id  # noqa: E402
from storage.migrate import migrate  # noqa: E402
from storage.workspaces import ensure_workspace  # noqa: E402

ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")

VARIANTS: dict[str, list[str]] = {
    "as-is": [],
    "no-outbox-trigger": ["ALTER TABLE events DISABLE TRIGGER events_analytics_outbox"],
    "no-keyed-trigger": ["ALTER TABLE events DISABLE TRIGGER events_keyed_upkeep"],
    "jit-off": ["SET jit = off"],  # on the writing connection only
    "profiles-fillfactor-70": ["ALTER TABLE user_profiles SET (fillfactor = 70)"],
    # The keyed trigger's profile upsert alone: no erasure locks or probes (not a correct design, a split
    # of where the trigger's time goes).
    "keyed-upsert-only": ["""
CREATE OR REPLACE FUNCTION tally_keyed_upkeep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO user_profiles AS u (workspace_id, env, user_id, created_at, last_seen_at, event_count)
    SELECT n.workspace_id, n.env, n.user_id, min(n.ts), max(n.ts), count(*)
    FROM new_events n WHERE n.site_id IS NULL AND n.user_id IS NOT NULL
    GROUP BY n.workspace_id, n.env, n.user_id ORDER BY n.workspace_id, n.env, n.user_id
    ON CONFLICT (workspace_id, env, user_id) DO UPDATE
    SET event_count = u.event_count + EXCLUDED.event_count,
        created_at = LEAST(u.created_at, EXCLUDED.created_at),
        last_seen_at = GREATEST(u.last_seen_at, EXCLUDED.last_seen_at);
    RETURN NULL;
END $$"""],
    # The upsert as an UPDATE of the profiles that exist, then an INSERT of the rest (no tuple lock record
    # per profile; the UPDATE's lock order is the plan's, so not a design either, a measurement).
    "keyed-update-then-insert": ["""
CREATE OR REPLACE FUNCTION tally_keyed_upkeep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH a AS (SELECT n.workspace_id, n.env, n.user_id, min(n.ts) AS lo, max(n.ts) AS hi, count(*) AS c
               FROM new_events n WHERE n.site_id IS NULL AND n.user_id IS NOT NULL
               GROUP BY n.workspace_id, n.env, n.user_id),
    u AS (UPDATE user_profiles p SET event_count = p.event_count + a.c, created_at = LEAST(p.created_at, a.lo),
                 last_seen_at = GREATEST(p.last_seen_at, a.hi)
          FROM a WHERE p.workspace_id = a.workspace_id AND p.env = a.env AND p.user_id = a.user_id
          RETURNING p.user_id)
    INSERT INTO user_profiles AS p (workspace_id, env, user_id, created_at, last_seen_at, event_count)
    SELECT a.workspace_id, a.env, a.user_id, a.lo, a.hi, a.c FROM a
    WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.user_id = a.user_id)
    ORDER BY 1, 2, 3
    ON CONFLICT (workspace_id, env, user_id) DO UPDATE
    SET event_count = p.event_count + EXCLUDED.event_count,
        created_at = LEAST(p.created_at, EXCLUDED.created_at),
        last_seen_at = GREATEST(p.last_seen_at, EXCLUDED.last_seen_at);
    RETURN NULL;
END $$"""],
    "keyed-no-upsert": ["""
CREATE OR REPLACE FUNCTION tally_keyed_upkeep() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    scope record;
BEGIN
    FOR scope IN
        SELECT DISTINCT n.workspace_id, n.env FROM new_events n
        WHERE n.site_id IS NULL AND n.user_id IS NOT NULL ORDER BY 1, 2
    LOOP
        PERFORM pg_advisory_xact_lock_shared((scope.workspace_id % 2147483647)::integer,
                                             CASE WHEN scope.env = 'test' THEN 1 ELSE 0 END);
    END LOOP;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM new_events n JOIN erasures x
                 ON x.workspace_id = n.workspace_id AND x.env = n.env AND x.user_id = n.user_id
                WHERE n.site_id IS NULL AND x.erased_at >= n.received_at) THEN
        RAISE EXCEPTION 'not in this benchmark';
    END IF;
    RETURN NULL;
END $$"""],
}


def keyed_rows(workspace_id: int, n: int) -> list[EventRow]:
    now = datetime.now(UTC)
    return [EventRow(new_id("evt"), workspace_id, "live", "page_viewed", now, now,
                     user_id=f"u{random.randint(1, 5000)}", properties={"path": "/pricing", "plan": "pro"})
            for _ in range(n)]


def site_rows(workspace_id: int, n: int) -> list[EventRow]:
    now = datetime.now(UTC)
    return [EventRow(new_id("evt"), workspace_id, "live", "pageview", now, now, site_id="site_bench",
                     session_id=new_id("ses"), url="https://bench.example/pricing", path="/pricing",
                     referrer="https://news.example/", title="Pricing", viewport_w=1280, country="DE",
                     ip_hash="h" * 16, browser="Chrome", browser_version="131", os="Windows",
                     os_version="10", device="desktop", source="news.example", channel="Referral")
            for _ in range(n)]


async def measure(dsn: str, sql: list[str], kind: str, batches: int, size: int, mirror_every: int) -> dict:
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    await migrate(conn)
    for statement in sql:
        await conn.execute(statement)
    workspace_id = await ensure_workspace(conn, "bench")
    await conn.execute("SELECT tally_ensure_event_partition(now())")
    make = keyed_rows if kind == "keyed" else site_rows
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    reader = await asyncpg.connect(dsn)
    await init_connection(reader)
    reader_pid = await reader.fetchval("SELECT pg_backend_pid()")
    warm = batches // 10
    store_cpu = out_cpu = 0.0
    wal_start = None
    for i in range(warm + batches):
        if i == warm:
            wal_start = await conn.fetchval("SELECT pg_current_wal_lsn()")
        rows = make(workspace_id, size)
        before = backend_cpu(pid)
        await copy_events(conn, rows)
        if i >= warm:
            store_cpu += backend_cpu(pid) - before
        if mirror_every and (i + 1) % mirror_every == 0:  # the outbox side of a mirror round, no store
            before = backend_cpu(reader_pid)
            async with reader.transaction(isolation="repeatable_read"):
                await reader.execute("SET LOCAL jit = off")
                bound = await reader.fetchval(mirror._BOUND, 1_000_000)
                if bound is not None:
                    await mirror.copy_events(reader, mirror._OUTBOX_EVENTS, bound)
                    await reader.execute(mirror._DONE, bound)
            if i >= warm:
                out_cpu += backend_cpu(reader_pid) - before
    wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", wal_start)
    await reader.close()
    await asyncio.sleep(0.6)  # the statistics collector's flush interval (PostgreSQL 15+: at transaction end)
    upd, hot = await conn.fetchrow("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                                   "WHERE relname = 'user_profiles'")
    await conn.close()
    n = batches * size
    return {"store": store_cpu / n * 1e6, "outbox_out": out_cpu / n * 1e6, "hot": hot / upd if upd else 0.0,
            "wal": float(wal) / n}


async def admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--kind", choices=("keyed", "site"), default="keyed")
    parser.add_argument("--mirror-every", type=int, default=300,
                        help="run the outbox side of a mirror round every N batches (0: never)")
    parser.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS))
    parser.add_argument("--repeat", type=int, default=2, help="measure each variant this many times, interleaved")
    args = parser.parse_args()
    names = args.variant or list(VARIANTS)
    results: dict[str, list[dict]] = {v: [] for v in names}
    for _ in range(args.repeat):
        for name in names:
            db = f"tally_pgcost_{secrets.token_hex(4)}"
            await admin(f'CREATE DATABASE "{db}"')
            try:
                dsn = urlparse(ADMIN)._replace(path=f"/{db}").geturl()
                results[name].append(await measure(dsn, VARIANTS[name], args.kind, args.batches, args.batch,
                                                   args.mirror_every))
            finally:
                await admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print(f"\n{args.kind} events, {args.batches} COPYs of {args.batch}; PostgreSQL CPU µs per event "
          f"(each measurement)\n")
    print(f"{'variant':28} {'store':>20} {'outbox COPY out + DELETE':>26} {'profile updates HOT':>20} "
          f"{'WAL bytes/event':>16}")
    for name, runs in results.items():
        store = ", ".join(f"{r['store']:.1f}" for r in runs)
        out = ", ".join(f"{r['outbox_out']:.1f}" for r in runs)
        hot = ", ".join(f"{r['hot']:.0%}" for r in runs)
        wal = ", ".join(f"{r['wal']:.0f}" for r in runs)
        print(f"{name:28} {store:>20} {out:>26} {hot:>20} {wal:>16}")


if __name__ == "__main__":
    asyncio.run(main())
