"""Migrations apply once, idempotently, even when processes start together."""

import asyncio
import secrets

import asyncpg

from storage.migrate import available, migrate


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
