"""Migrations apply once, idempotently, even when processes start together."""

import asyncio
import secrets
from datetime import UTC, datetime, timedelta

import asyncpg

from storage.db import init_connection
from storage.events import EventRow, copy_events
from storage.ids import new_id
from storage.migrate import available, migrate
from storage.workspaces import ensure_workspace
from tests.test_analytics_durability import drop_database, fresh_database


async def test_migrations_apply_once_even_concurrently(pg_admin_dsn):
    name = f"tally_mig_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(pg_admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = pg_admin_dsn.rsplit("/", 1)[0] + f"/{name}"
        conns = [await asyncpg.connect(dsn) for _ in range(3)]
        results = await asyncio.gather(*[migrate(c) for c in conns])
        applied = sorted(v for r in results for v in r)
        assert applied == [v for v, _, _ in available()]  # each version applied by exactly one process
        assert await migrate(conns[0]) == []  # and again: nothing to do
        rows = await conns[0].fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in rows] == [v for v, _, _ in available()]
        for c in conns:
            await c.close()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_partitions_are_created_on_demand_for_old_months(client, make_key):
    from tests.conftest import bearer

    key = await make_key("read,write")
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "backfill", "user_id": "u", "timestamp": "2003-02-14T12:00:00Z"})
    assert resp.status == 200
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert listed["data"][0]["timestamp"] == "2003-02-14T12:00:00.000Z"


async def test_a_new_partition_waits_for_no_reader(client, make_key, database_url):
    """Security walk-through F2: `CREATE TABLE … PARTITION OF events` took ACCESS EXCLUSIVE on events, so a
    back-dated event waited for any read of events in progress (a custom SQL report, up to its timeout)
    and every other workspace's flush queued behind it. The partition is now attached, which lets
    readers and writers of the other partitions go on."""
    from tests.conftest import bearer

    key, other = await make_key("write"), await make_key("write", workspace_name=f"other-{secrets.token_hex(4)}")
    reader = await asyncpg.connect(database_url)
    for year, mon in ((y, m) for y in range(2000, 2003) for m in range(1, 13)):  # a month with no partition yet
        if await reader.fetchval("SELECT to_regclass($1)", f"events_{year}_{mon:02d}") is None:
            break
    month = f"{year}-{mon:02d}-15T12:00:00Z"
    try:
        async with reader.transaction():
            await reader.fetchval("SELECT count(*) FROM events")  # holds ACCESS SHARE until the end

            async def post(k: str, body: dict) -> int:
                resp = await client.post("/v1/events", headers=bearer(k), json=body)
                return resp.status

            statuses = await asyncio.wait_for(asyncio.gather(
                post(key, {"event": "backfill", "user_id": "u", "timestamp": month}),
                post(other, {"event": "today", "user_id": "v"}),
            ), timeout=3)
            assert statuses == [200, 200]
    finally:
        await reader.close()
    conn = await asyncpg.connect(database_url)
    try:
        part = "events_" + month[:7].replace("-", "_")
        bound = await conn.fetchval("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = $1", part)
        assert bound is not None and bound.startswith("FOR VALUES FROM")
        indexes = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = $1", part)
        assert indexes == await conn.fetchval(
            "SELECT count(*) FROM pg_partitioned_table p JOIN pg_index i ON i.indrelid = p.partrelid "
            "WHERE p.partrelid = 'events'::regclass")
    finally:
        await conn.close()


async def test_profiles_alias_started_after_their_last_event_are_repaired(pg_admin_dsn):
    """Migration 0024: a profile made by alias before it began at its events' earliest receive time, after
    its last event; the migration starts it at its first event."""
    dsn = await fresh_database(pg_admin_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await init_connection(conn)
        await migrate(conn, upto=23)
        ws = await ensure_workspace(conn, "repair")
        at, received = datetime(2026, 11, 20, 10, tzinfo=UTC), datetime.now(UTC)
        await conn.execute("SELECT tally_ensure_event_partition($1)", at)
        await copy_events(conn, [EventRow(new_id("evt"), ws, "live", "viewed", at + timedelta(hours=h), received,
                                          anonymous_id="anon") for h in (0, 1)])
        await conn.execute("SELECT tally_segment_alias($1, 'live', 'anon', 'user')", ws)
        profile = "SELECT created_at, last_seen_at FROM user_profiles WHERE workspace_id = $1 AND user_id = 'user'"
        assert (await conn.fetchrow(profile, ws))["created_at"] > at + timedelta(hours=1)  # the fault
        await migrate(conn)
        assert tuple(await conn.fetchrow(profile, ws)) == (at, at + timedelta(hours=1))
    finally:
        await conn.close()
        await drop_database(pg_admin_dsn, dsn)


async def test_processes_making_the_same_partition_at_once_all_succeed(database_url):
    """Two flushes meet a month without a partition: the second waits for the first's lock, and once the
    first has committed it must find the partition made, not fail with "already exists" (the check after
    the lock read the catalog as it was before the lock was granted: every batch but one failed, found by
    bench/actor_path.py)."""
    first, second = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    try:
        await migrate(first)
        for year, mon in ((y, m) for y in range(2003, 2006) for m in range(1, 13)):  # a month with none yet
            if await first.fetchval("SELECT to_regclass($1)", f"events_{year}_{mon:02d}") is None:
                break
        month = datetime(year, mon, 10, tzinfo=UTC)
        async with first.transaction():
            await first.execute("SELECT tally_ensure_event_partition($1)", month)
            waiting = asyncio.create_task(second.execute("SELECT tally_ensure_event_partition($1)", month))
            for _ in range(200):  # until the second waits for the first's lock
                if await first.fetchval("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1",
                                        second.get_server_pid()) == "Lock":
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the second never waited for the first's lock")
        await asyncio.wait_for(waiting, timeout=10)  # no error
        assert await second.fetchval("SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass($1)",
                                     f"events_{year}_{mon:02d}") == 1
    finally:
        await first.close()
        await second.close()
