"""Syncs from a second PostgreSQL server (tests/customer_pg.py; Tally's own server is out of bounds for
sources) and the machine's MariaDB into events and profiles: first sync, incremental syncs (manual and
scheduled), error -> active, pause, and delete keeping imported data."""

from __future__ import annotations

import secrets
from urllib.parse import urlparse

import aiomysql
import asyncpg
import pytest

from app.crypto import CredentialBox
from tests.conftest import bearer
from tests.test_data_sources import create, run_job, wait_status


@pytest.fixture
async def scratch_pg(customer_pg_dsn: str):
    """A scratch database holding a `signups` table on the customer server, dropped after the test."""
    name = f"tally_src_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(customer_pg_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlparse(customer_pg_dsn)._replace(path=f"/{name}").geturl()
    conn = await asyncpg.connect(dsn)
    await conn.execute("""CREATE TABLE signups (id serial PRIMARY KEY, user_id text, plan text,
                          amount numeric(10, 2), created_at timestamptz NOT NULL)""")
    try:
        yield name, conn, urlparse(customer_pg_dsn).port
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def add_signups(conn, *rows: tuple[str, str, str]) -> None:
    await conn.executemany(
        "INSERT INTO signups (user_id, plan, amount, created_at) VALUES ($1, $2, 9.5, $3::text::timestamptz)", rows
    )


def pg_source(database: str, port: int, **options) -> dict:
    return {
        "name": "warehouse", "type": "postgres",
        "credentials": {"host": "127.0.0.1", "port": port, "database": database, "username": "postgres",
                        "password": "pg-password-not-needed"},
        "options": {"table": "signups", "cursor_column": "id", "timestamp_column": "created_at",
                    "event_name": "signed_up", **options},
    }


async def events(client, key: str, name: str) -> list[dict]:
    resp = await client.get(f"/v1/events?event={name}&limit=1000", headers=bearer(key))
    assert resp.status == 200
    return (await resp.json())["data"]


async def test_postgres_first_sync_then_incremental(client, make_key, scratch_pg, pool):
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"), ("u2", "pro", "2024-03-02T10:00:00Z"),
                      ("u1", "pro", "2024-03-03T10:00:00Z"))
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert body["last_synced_at"] is not None and body["status_reason"] is None
    got = await events(client, key, "signed_up")
    assert len(got) == 3
    assert got[0]["user_id"] == "u1" and got[0]["timestamp"] == "2024-03-03T10:00:00.000Z"
    assert got[0]["properties"]["plan"] == "pro" and got[0]["properties"]["amount"] == 9.5
    assert all(e["id"].startswith("evt_") for e in got)
    profile = await (await client.get("/v1/users/u1", headers=bearer(key))).json()
    assert profile["event_count"] == 2 and profile["last_seen_at"] == "2024-03-03T10:00:00.000Z"

    # Manual sync: only the new rows.
    await add_signups(conn, ("u3", "free", "2024-03-04T10:00:00Z"), ("u4", "free", "2024-03-05T10:00:00Z"))
    resp = await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))
    assert resp.status == 202
    await wait_status(client, key, created["id"], "active")
    assert len(await events(client, key, "signed_up")) == 5

    # Scheduled sync: due sources run when the scheduler job runs.
    await add_signups(conn, ("u5", "team", "2024-03-06T10:00:00Z"))
    await run_job(client, pool, created["id"])
    assert len(await events(client, key, "signed_up")) == 5  # not due yet (daily at 00:00)
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute' WHERE id = $1",
                       created["id"])
    await run_job(client, pool, created["id"])
    assert len(await events(client, key, "signed_up")) == 6
    body = await wait_status(client, key, created["id"], "active")
    assert body["rows_imported"] == 6
    assert body["next_sync_at"].endswith("T00:00:00.000Z")


async def test_error_then_active_after_a_later_successful_sync(client, make_key, scratch_pg):
    database, conn, port = scratch_pg
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="orders", event_name="order_placed"))
    body = await wait_status(client, key, created["id"], "error")
    assert "orders" in body["status_reason"] and body["last_synced_at"] is None
    await conn.execute("CREATE TABLE orders (id int, user_id text, created_at timestamptz)")
    await conn.execute("INSERT INTO orders VALUES (1, 'u9', '2024-04-01T00:00:00Z')")
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active" and body["status_reason"] is None and body["last_synced_at"]
    assert [e["user_id"] for e in await events(client, key, "order_placed")] == ["u9"]


async def test_redshift_speaks_the_postgres_protocol(client, make_key, scratch_pg):
    database, conn, port = scratch_pg
    await add_signups(conn, ("r1", "free", "2024-03-01T10:00:00Z"))
    key = await make_key("admin,read")
    created = await create(client, key, {**pg_source(database, port), "type": "redshift"})
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    assert [e["user_id"] for e in await events(client, key, "signed_up")] == ["r1"]


async def test_credentials_sealed_under_another_secret_end_in_error(client, make_key, scratch_pg, pool):
    database, _, port = scratch_pg
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    await wait_status(client, key, created["id"], "active")
    await pool.execute("UPDATE data_sources SET credentials = $2, next_sync_at = now() - interval '1 minute' "
                       "WHERE id = $1", created["id"], CredentialBox("another-secret").seal(b"{}", created["id"]))
    await run_job(client, pool, created["id"])
    body = await wait_status(client, key, created["id"], "error")
    assert "cannot be decrypted" in body["status_reason"]


async def test_credentials_that_decrypt_but_do_not_decode_say_so(client, make_key, scratch_pg, pool, settings):
    database, _, port = scratch_pg
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    await wait_status(client, key, created["id"], "active")
    await pool.execute("UPDATE data_sources SET credentials = $2, next_sync_at = now() - interval '1 minute' "
                       "WHERE id = $1", created["id"],
                       CredentialBox(settings.secret).seal(b'{"host": 5}', created["id"]))
    await run_job(client, pool, created["id"])
    body = await wait_status(client, key, created["id"], "error")
    assert body["status_reason"].startswith("the stored credentials are not valid postgres credentials")


async def test_wrong_database_is_error_with_reason(client, make_key, customer_pg_dsn):
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(f"tally_missing_{secrets.token_hex(3)}",
                                                  urlparse(customer_pg_dsn).port))
    body = await wait_status(client, key, created["id"], "error")
    assert "does not exist" in body["status_reason"]


async def test_pause_stops_scheduled_syncs_and_resume_restarts_them(client, make_key, scratch_pg, pool):
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"))
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    await wait_status(client, key, created["id"], "active")
    assert (await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(key))).status == 200
    await add_signups(conn, ("u2", "free", "2024-03-02T10:00:00Z"))
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute' WHERE id = $1",
                       created["id"])
    await run_job(client, pool, created["id"])
    assert (await wait_status(client, key, created["id"], "paused"))["status"] == "paused"
    assert len(await events(client, key, "signed_up")) == 1
    resumed = await (await client.post(f"/v1/data-sources/{created['id']}/resume", headers=bearer(key))).json()
    assert resumed["status"] == "active"
    await run_job(client, pool, created["id"])  # next sync per schedule: not yet
    assert len(await events(client, key, "signed_up")) == 1
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute' WHERE id = $1",
                       created["id"])
    await run_job(client, pool, created["id"])
    assert len(await events(client, key, "signed_up")) == 2


async def test_delete_keeps_imported_events_and_stops_syncs(client, make_key, scratch_pg, pool):
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"), ("u2", "pro", "2024-03-02T10:00:00Z"))
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    await wait_status(client, key, created["id"], "active")
    assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 204
    await add_signups(conn, ("u3", "free", "2024-03-03T10:00:00Z"))
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute'")
    await run_job(client, pool, created["id"])
    assert len(await events(client, key, "signed_up")) == 2
    assert (await client.get("/v1/users/u2", headers=bearer(key))).status == 200
    assert await pool.fetchval("SELECT count(*) FROM data_sources WHERE id = $1", created["id"]) == 0


async def test_one_time_import_without_cursor_column(client, make_key, scratch_pg):
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"), ("u2", "pro", "2024-03-02T10:00:00Z"))
    key = await make_key("admin,read")
    source = pg_source(database, port)
    del source["options"]["cursor_column"]
    created = await create(client, key, source)
    await wait_status(client, key, created["id"], "active")
    await add_signups(conn, ("u3", "free", "2024-03-03T10:00:00Z"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    await wait_status(client, key, created["id"], "active")
    assert len(await events(client, key, "signed_up")) == 2


MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}


@pytest.fixture
async def scratch_mysql():
    name = f"tally_src_{secrets.token_hex(4)}"
    conn = await aiomysql.connect(**MYSQL, autocommit=True)
    async with conn.cursor() as cur:
        await cur.execute(f"CREATE DATABASE `{name}`")
        await cur.execute(f"""CREATE TABLE `{name}`.actions (id int AUTO_INCREMENT PRIMARY KEY,
                              user_id varchar(64), action varchar(64), price decimal(8, 2), created_at datetime)""")
    try:
        yield name, conn
    finally:
        async with conn.cursor() as cur:
            await cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


async def add_actions(conn, database: str, *rows: tuple) -> None:
    async with conn.cursor() as cur:
        await cur.executemany(
            f"INSERT INTO `{database}`.actions (user_id, action, price, created_at) VALUES (%s, %s, %s, %s)", rows
        )


def mysql_source(database: str, **options) -> dict:
    return {
        "name": "shop", "type": "mysql",
        "credentials": {"host": "127.0.0.1", "port": 3306, "database": database, "username": "root", "password": ""},
        "options": {"cursor_column": "id", "timestamp_column": "created_at", **options},
        "schedule": {"frequency": "hourly"},
    }


async def test_mysql_query_with_event_column_and_incremental_sync(client, make_key, scratch_mysql):
    database, conn = scratch_mysql
    await add_actions(conn, database, ("m1", "Added To Cart", "3.50", "2024-02-01 08:00:00"),
                      ("m2", "checkout", "10.00", "2024-02-01 09:00:00"))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(
        database, query="SELECT id, user_id, action, price, created_at FROM actions", event_column="action"))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    [cart] = await events(client, key, "added_to_cart")
    assert cart["user_id"] == "m1" and cart["timestamp"] == "2024-02-01T08:00:00.000Z"
    assert cart["properties"]["price"] == 3.5 and "action" not in cart["properties"]
    await add_actions(conn, database, ("m1", "checkout", "7.25", "2024-02-02 09:00:00"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    await wait_status(client, key, created["id"], "active")
    assert len(await events(client, key, "checkout")) == 2
    assert len(await events(client, key, "added_to_cart")) == 1
    profile = await (await client.get("/v1/users/m1", headers=bearer(key))).json()
    assert profile["event_count"] == 2


async def test_mysql_query_with_a_percent_sign_syncs_incrementally(client, make_key, scratch_mysql):
    """pymysql formats statements with %: a LIKE pattern in the user's query must survive the cursor
    argument of incremental syncs (and the first sync, which has none)."""
    database, conn = scratch_mysql
    await add_actions(conn, database, ("m1", "buy-10%", "3.50", "2024-02-01 08:00:00"),
                      ("m2", "browse", "0.00", "2024-02-01 09:00:00"))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(
        database, query="SELECT id, user_id, created_at FROM actions WHERE action LIKE '%10\\%'",
        event_name="discounted"))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert [e["user_id"] for e in await events(client, key, "discounted")] == ["m1"]
    await add_actions(conn, database, ("m3", "buy-10%", "7.25", "2024-02-02 09:00:00"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert sorted(e["user_id"] for e in await events(client, key, "discounted")) == ["m1", "m3"]


async def test_mysql_wrong_password_is_error(client, make_key, scratch_mysql):
    database, _ = scratch_mysql
    key = await make_key("admin,read")
    created = await create(client, key, {
        "name": "shop", "type": "mysql",
        "credentials": {"host": "127.0.0.1", "database": database, "username": "root", "password": "not-it"},
    })
    body = await wait_status(client, key, created["id"], "error")
    assert "Access denied" in body["status_reason"] and "not-it" not in body["status_reason"]


async def test_properties_mapping_picks_and_renames_columns(client, make_key, scratch_pg):
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "pro", "2024-03-01T10:00:00Z"))
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, properties={"tier": "plan", "paid": "amount"}))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    [event] = await events(client, key, "signed_up")
    assert event["properties"] == {"tier": "pro", "paid": 9.5}
    # A mapped column the table lacks fails the check, naming it.
    bad = await create(client, key, pg_source(database, port, properties={"tier": "plan_name"}))
    body = await wait_status(client, key, bad["id"], "error")
    assert "plan_name" in body["status_reason"]


async def test_mysql_event_column_names_like_segment_and_null_is_no_name(client, make_key, scratch_mysql):
    """Event names from a column are snake_cased by Segment's conversion (app/event_names.py): accents
    dropped, camelCase split, names without a Latin letter or digit hashed; a NULL or blank value gets the
    name the row would have without event_column (the table's), never "none"."""
    from app.segment.messages import event_name

    database, conn = scratch_mysql
    names = [None, "None", "Crème Brûlée", "注文完了", "orderCompleted", "  "]
    await add_actions(conn, database, *((f"n{i}", name, "1.00", "2024-02-01 08:00:00") for i, name in enumerate(names)))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(database, table="actions", event_column="action"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    expected = {"n0": "actions", "n1": "none", "n2": "creme_brulee", "n3": event_name("注文完了"),
                "n4": "order_completed", "n5": "actions"}
    resp = await client.get("/v1/events?limit=1000", headers=bearer(key))
    got = {e["user_id"]: e["event"] for e in (await resp.json())["data"]}
    assert got == expected
    assert expected["n3"].startswith("e_")


async def test_mysql_time_columns_read_as_mysql_shows_them(client, make_key, scratch_mysql):
    database, conn = scratch_mysql
    async with conn.cursor() as cur:
        await cur.execute(f"CREATE TABLE `{database}`.shifts (id int PRIMARY KEY, user_id varchar(9), "
                          "t time, t3 time(3))")
        await cur.execute(f"INSERT INTO `{database}`.shifts VALUES (1, 'a', '12:34:56', '12:34:56.500'), "
                          "(2, 'b', '100:00:00', NULL), (3, 'c', '-00:30:00', '-838:59:59.000')")
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(database, table="shifts", timestamp_column=None,
                                                     cursor_column="t"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    got = {e["user_id"]: e["properties"] for e in await events(client, key, "shifts")}
    assert got == {"a": {"id": 1, "t": "12:34:56", "t3": "12:34:56.500"},
                   "b": {"id": 2, "t": "100:00:00", "t3": None},
                   "c": {"id": 3, "t": "-00:30:00", "t3": "-838:59:59.000"}}
    async with conn.cursor() as cur:  # a TIME cursor column syncs incrementally
        await cur.execute(f"INSERT INTO `{database}`.shifts VALUES (4, 'd', '101:00:00', NULL)")
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    assert sorted(e["user_id"] for e in await events(client, key, "shifts")) == ["a", "b", "c", "d"]


async def test_postgres_intervals_read_as_postgresql_shows_them(client, make_key, scratch_pg):
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE shifts (id int PRIMARY KEY, user_id text, d interval)")
    await conn.execute("INSERT INTO shifts VALUES (1, 'a', '100 hours'), (2, 'b', '-30 minutes'), "
                       "(3, 'c', '1 mon 2 days 03:00:00'), (4, 'd', NULL)")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="shifts", timestamp_column=None,
                                                  event_name="shift"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    got = {e["user_id"]: e["properties"]["d"] for e in await events(client, key, "shift")}
    assert got == {"a": "100:00:00", "b": "-00:30:00", "c": "1 mon 2 days 03:00:00", "d": None}
