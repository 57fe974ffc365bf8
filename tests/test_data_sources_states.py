"""The status a pause and resume leave: a source paused before its connection check passed is `testing` again
once resumed (and the check runs), as it would be had it not been paused; it used to come back `active` (or
`syncing`) with its check never finished and nothing imported."""

from __future__ import annotations

from urllib.parse import urlparse

import asyncpg

from tests.conftest import bearer
from tests.test_data_sources import create, run_job, wait_idle, wait_status
from tests.test_data_sources_sql import add_signups, events, pg_source, scratch_pg  # noqa: F401 (fixture)


async def post(client, key: str, source_id: str, action: str) -> dict:
    resp = await client.post(f"/v1/data-sources/{source_id}/{action}", headers=bearer(key))
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_a_source_paused_while_testing_is_testing_once_resumed(
        client, make_key, scratch_pg, customer_pg_dsn, pool):  # noqa: F811
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"))
    key = await make_key("admin,read")
    # Another session of the customer's holds the table: the connection check waits on it.
    locker = await asyncpg.connect(urlparse(customer_pg_dsn)._replace(path=f"/{database}").geturl())
    try:
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE signups IN ACCESS EXCLUSIVE MODE")
        source = (await create(client, key, pg_source(database, port)))["id"]
        assert (await post(client, key, source, "pause"))["status"] == "paused"
        # Resumed while its check still waits: it is being tested, not syncing.
        assert (await post(client, key, source, "resume"))["status"] == "testing"
        assert (await post(client, key, source, "pause"))["status"] == "paused"
        await lock.rollback()
    finally:
        await locker.close()
    # The check passes; the first page finds the source paused, and the run stops without importing it.
    await wait_idle(client)
    body = await wait_status(client, key, source, "paused")
    assert body["last_synced_at"] is None and await events(client, key, "signed_up") == []

    resumed = await post(client, key, source, "resume")
    assert resumed["status"] == "testing", resumed
    resp = await client.post(f"/v1/data-sources/{source}/sync", headers=bearer(key))  # no run: the job's to start
    assert resp.status == 409 and "still being tested" in (await resp.json())["error"]["message"]
    # A testing source is due at once: the job checks it and runs its first sync.
    await run_job(client, pool, source)
    body = await wait_status(client, key, source, "active", "error")
    assert body["status"] == "active" and body["last_synced_at"] is not None, body
    assert [e["user_id"] for e in await events(client, key, "signed_up")] == ["u1"]

