"""A SQL source whose query never returns (the customer's table locked by a migration, a query that runs for
hours) ends in `error` within the query wait, and the other sources sync: a stuck read held its source, and
one of the scheduled job's few slots, for as long as it hung (tests/test_data_sources_schedule.py covers a long
import beside other sources)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import aiomysql
import asyncpg

from app.appkeys import SCHEDULER
from app.sources.runner import JOB
from tests.conftest import bearer
from tests.test_data_sources import create, park_other_sources, wait_status
from tests.test_data_sources_sql import (  # noqa: F401 (fixtures)
    MYSQL,
    add_actions,
    add_signups,
    events,
    mysql_source,
    pg_source,
    scratch_mysql,
    scratch_pg,
)

WAIT = 1.0  # the query wait, shortened for the test


async def run_due_job(client, pool, *source_ids: str) -> None:
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute' WHERE id = ANY($1)",
                       list(source_ids))
    await park_other_sources(pool, *source_ids)
    # Bounded, so that the job hanging fails the test instead of stalling it.
    await asyncio.wait_for(client.app[SCHEDULER].run_now(JOB), 60)


async def test_a_postgres_read_that_never_returns_ends_in_error_and_others_sync(
        client, make_key, scratch_pg, customer_pg_dsn, pool, monkeypatch):  # noqa: F811
    monkeypatch.setattr("app.sources.sql.QUERY_WAIT_SECONDS", WAIT)
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"))
    await conn.execute("CREATE TABLE orders (id int, user_id text, created_at timestamptz)")
    key = await make_key("admin,read")
    stuck = (await create(client, key, pg_source(database, port)))["id"]
    other = (await create(client, key, pg_source(database, port, table="orders", event_name="order_placed")))["id"]
    assert (await wait_status(client, key, stuck, "active", "error"))["status"] == "active"
    assert (await wait_status(client, key, other, "active", "error"))["status"] == "active"
    await add_signups(conn, ("u2", "pro", "2024-03-02T10:00:00Z"))
    await conn.execute("INSERT INTO orders VALUES (1, 'u9', '2024-04-01T00:00:00Z')")

    # Another session of the customer's (a migration) holds the signups table: reading it waits.
    locker = await asyncpg.connect(urlparse(customer_pg_dsn)._replace(path=f"/{database}").geturl())
    try:
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE signups IN ACCESS EXCLUSIVE MODE")
        await run_due_job(client, pool, stuck, other)
        body = await wait_status(client, key, stuck, "active", "error")
        assert body["status"] == "error"
        assert body["status_reason"] == "the database did not answer the query within 1s"
        assert (await wait_status(client, key, other, "active", "error"))["status"] == "active"
        assert [e["user_id"] for e in await events(client, key, "order_placed")] == ["u9"]
        await lock.rollback()
    finally:
        await locker.close()

    # The table free again, the next sync imports what waited, once.
    assert (await client.post(f"/v1/data-sources/{stuck}/sync", headers=bearer(key))).status == 202
    assert (await wait_status(client, key, stuck, "active", "error"))["status"] == "active"
    assert sorted(e["user_id"] for e in await events(client, key, "signed_up")) == ["u1", "u2"]


async def test_a_mysql_read_that_never_returns_ends_in_error(
        client, make_key, scratch_mysql, pool, monkeypatch):  # noqa: F811
    monkeypatch.setattr("app.sources.sql.QUERY_WAIT_SECONDS", WAIT)
    database, conn = scratch_mysql
    await add_actions(conn, database, ("m1", "buy", 5, "2024-05-01 10:00:00"))
    key = await make_key("admin,read")
    source = (await create(client, key, mysql_source(database, table="actions", event_name="bought")))["id"]
    assert (await wait_status(client, key, source, "active", "error"))["status"] == "active"
    await add_actions(conn, database, ("m2", "buy", 6, "2024-05-02 10:00:00"))

    locker = await aiomysql.connect(**MYSQL, db=database)
    try:
        async with locker.cursor() as cur:
            await cur.execute("LOCK TABLES actions WRITE")  # reads of it wait
            await run_due_job(client, pool, source)
            body = await wait_status(client, key, source, "active", "error")
            assert body["status"] == "error"
            assert body["status_reason"] == "the database did not answer the query within 1s"
            await cur.execute("UNLOCK TABLES")
    finally:
        locker.close()

    assert (await client.post(f"/v1/data-sources/{source}/sync", headers=bearer(key))).status == 202
    assert (await wait_status(client, key, source, "active", "error"))["status"] == "active"
    assert sorted(e["user_id"] for e in await events(client, key, "bought")) == ["m1", "m2"]
