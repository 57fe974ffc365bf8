"""Incremental SQL syncs at the cursor's edges: rows that arrive after a sync with the cursor value it ended on
(a second-precision column, a date), rows whose cursor is NULL; JSON columns as properties; a
connection lost mid-sync."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.conftest import bearer
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_sql import (  # noqa: F401 (fixtures)
    add_actions,
    events,
    mysql_source,
    pg_source,
    scratch_mysql,
    scratch_pg,
)


async def sync(client, key: str, source_id: str) -> dict:
    assert (await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))).status == 202
    return await wait_status(client, key, source_id, "active", "error")


async def test_rows_added_later_with_the_last_cursor_value_are_imported_once(client, make_key, scratch_mysql):  # noqa: F811
    """A DATETIME cursor holds whole seconds: a row written in the second the last sync ended on is new."""
    database, conn = scratch_mysql
    await add_actions(conn, database, ("a", "Buy", "1.00", "2024-02-01 08:00:00"),
                      ("b", "Buy", "1.00", "2024-02-01 08:00:01"), ("b2", "Buy", "1.00", "2024-02-01 08:00:01"))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(database, table="actions", cursor_column="created_at",
                                                     event_name="bought"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    await add_actions(conn, database, ("c", "Buy", "1.00", "2024-02-01 08:00:01"),
                      ("d", "Buy", "1.00", "2024-02-01 08:00:02"))
    assert (await sync(client, key, created["id"]))["status"] == "active"
    assert sorted(e["user_id"] for e in await events(client, key, "bought")) == ["a", "b", "b2", "c", "d"]
    # Nothing new: nothing imported again, the boundary rows included.
    await add_actions(conn, database, ("e", "Buy", "1.00", "2024-02-01 08:00:02"))
    body = await sync(client, key, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 6
    assert sorted(e["user_id"] for e in await events(client, key, "bought")) == ["a", "b", "b2", "c", "d", "e"]
    body = await sync(client, key, created["id"])
    assert len(await events(client, key, "bought")) == 6 and body["rows_imported"] == 6


async def test_identical_rows_at_the_boundary_each_count(client, make_key, scratch_pg):  # noqa: F811
    """Two rows alike in every column are two events, also when one arrives after the sync."""
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE visits (user_id text, day date)")
    await conn.execute("INSERT INTO visits VALUES ('v', '2024-05-01'), ('v', '2024-05-02'), ('v', '2024-05-02')")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="visits", cursor_column="day",
                                                  timestamp_column=None, event_name="visited"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    assert len(await events(client, key, "visited")) == 3
    await conn.execute("INSERT INTO visits VALUES ('v', '2024-05-02')")
    assert (await sync(client, key, created["id"]))["status"] == "active"
    assert len(await events(client, key, "visited")) == 4


async def test_rows_with_a_null_cursor_are_skipped_not_an_error(client, make_key, scratch_pg):  # noqa: F811
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE orders (id int, user_id text, paid_at timestamptz)")
    await conn.execute("INSERT INTO orders VALUES (1, 'p1', '2024-06-01T10:00:00Z'), (2, 'p2', NULL), "
                       "(3, 'p3', '2024-06-02T10:00:00Z')")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="orders", cursor_column="paid_at",
                                                  timestamp_column=None, event_name="order_paid"))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active" and body["status_reason"] is None, body
    assert sorted(e["user_id"] for e in await events(client, key, "order_paid")) == ["p1", "p3"]
    # Once paid, the row is imported by the next sync.
    await conn.execute("UPDATE orders SET paid_at = '2024-06-03T10:00:00Z' WHERE id = 2")
    assert (await sync(client, key, created["id"]))["status"] == "active"
    assert sorted(e["user_id"] for e in await events(client, key, "order_paid")) == ["p1", "p2", "p3"]


async def test_json_columns_become_json_properties(client, make_key, scratch_pg):  # noqa: F811
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE carts (id int, user_id text, items jsonb, meta json)")
    await conn.execute("""INSERT INTO carts VALUES (1, 'j1', '[{"sku": "A", "qty": 2}]', '{"coupon": "X"}'),
                          (2, 'j2', 'null', NULL)""")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="carts", timestamp_column=None,
                                                  event_name="cart"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    got = {e["user_id"]: e["properties"] for e in await events(client, key, "cart")}
    assert got["j1"] == {"id": 1, "items": [{"sku": "A", "qty": 2}], "meta": {"coupon": "X"}}
    assert got["j2"] == {"id": 2, "items": None, "meta": None}


async def test_a_connection_lost_mid_sync_says_so(client, make_key, scratch_pg, customer_pg_dsn):  # noqa: F811
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE slow (id int, user_id text)")
    await conn.execute("INSERT INTO slow SELECT g, 'u' || g FROM generate_series(1, 400) g")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table=None, timestamp_column=None,
                                                  query="SELECT *, pg_sleep(0.01) AS z FROM slow",
                                                  event_name="slow_row"))
    await wait_status(client, key, created["id"], "syncing")
    admin = await asyncpg.connect(customer_pg_dsn)
    try:
        for _ in range(200):  # the sync's query, once it runs
            if await admin.fetchval("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                    "WHERE query LIKE '%pg_sleep(0.01)%' AND pid <> pg_backend_pid()"):
                break
            await asyncio.sleep(0.05)
    finally:
        await admin.close()
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "error"
    assert body["status_reason"] == f"the connection to 127.0.0.1:{port} was lost during the sync"


async def test_mysql_timestamps_are_read_in_utc(client, make_key, scratch_mysql):  # noqa: F811
    """MySQL hands TIMESTAMP values over in the session's time zone, which defaults to the server's; the
    connector's session is UTC, so a server set to +05:00 no longer shifts every event by five hours. (This
    machine's server runs in UTC, so the session's zone is what can be checked here.)"""
    database, conn = scratch_mysql
    await add_actions(conn, database, ("t1", "Login", "0", "2024-01-01 10:00:00"))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(
        database, query="SELECT id, user_id, created_at, @@session.time_zone AS tz FROM actions",
        event_name="logged_in"))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    [event] = await events(client, key, "logged_in")
    assert event["properties"]["tz"] == "+00:00" and event["timestamp"] == "2024-01-01T10:00:00.000Z"


async def test_lookback_imports_rows_committed_late_with_an_earlier_cursor(client, make_key, scratch_pg):  # noqa: F811
    """created_at DEFAULT now() is the transaction's start: a transaction that commits after a sync can hold
    a row older than the cursor. lookback_seconds reads that far back again and skips what it imported."""
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE ev (user_id text, created_at timestamptz)")
    await conn.execute("INSERT INTO ev VALUES ('a', '2024-07-01T10:00:00Z'), ('c', '2024-07-01T10:00:10Z')")
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port, table="ev", cursor_column="created_at",
                                                  timestamp_column=None, event_name="ev", lookback_seconds=60))
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    await conn.execute("INSERT INTO ev VALUES ('b', '2024-07-01T10:00:05Z'), ('old', '2024-07-01T09:58:00Z')")
    body = await sync(client, key, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 3
    assert sorted(e["user_id"] for e in await events(client, key, "ev")) == ["a", "b", "c"]  # 'old': past it
    assert (await sync(client, key, created["id"]))["rows_imported"] == 3


async def test_lookback_needs_a_cursor_column(client, make_key, scratch_pg):  # noqa: F811
    database, _, port = scratch_pg
    key = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", headers=bearer(key), json=pg_source(
        database, port, cursor_column=None, timestamp_column=None, lookback_seconds=60))
    assert resp.status == 400
    [field] = (await resp.json())["error"]["fields"]
    assert field == {"field": "options.lookback_seconds", "message": "needs cursor_column"}


async def test_event_times_in_epoch_units_and_out_of_range(client, make_key, scratch_pg):  # noqa: F811
    """Epoch numbers in seconds, milliseconds or microseconds are times; a time Tally cannot hold (before
    2000, past tomorrow, infinity) is the import time, as a NULL one is, its value kept in the properties."""
    database, conn, port = scratch_pg
    await conn.execute("CREATE TABLE t (id int, user_id text, at_num bigint, at timestamptz)")
    await conn.execute("""INSERT INTO t VALUES (1, 's', 1704103200, '2024-01-01T10:00:00Z'),
                          (2, 'ms', 1704103200123, '0001-01-01T00:00:00Z'), (3, 'us', 1704103200123456, 'infinity'),
                          (4, 'far', 99999999999999999, '9999-12-31T00:00:00Z')""")
    key = await make_key("admin,read")
    for column in ("at_num", "at"):
        created = await create(client, key, pg_source(database, port, table="t", timestamp_column=column,
                                                      event_name=f"t_{column}"))
        body = await wait_status(client, key, created["id"], "active", "error")
        assert body["status"] == "active", body
    by_number = {e["user_id"]: e["timestamp"] for e in await events(client, key, "t_at_num")}
    assert by_number["s"] == "2024-01-01T10:00:00.000Z" and by_number["ms"] == "2024-01-01T10:00:00.123Z"
    assert by_number["us"] == "2024-01-01T10:00:00.123Z" and by_number["far"] > "2026"  # the import time
    by_time = {e["user_id"]: e for e in await events(client, key, "t_at")}
    assert by_time["s"]["timestamp"] == "2024-01-01T10:00:00.000Z"
    assert {u: by_time[u]["timestamp"][:4] for u in ("ms", "us", "far")} == {u: body["created_at"][:4]
                                                                             for u in ("ms", "us", "far")}
    assert by_time["ms"]["properties"]["at"].startswith("0001-01-01")


async def test_nul_characters_in_mysql_text_do_not_fail_the_sync(client, make_key, scratch_mysql):  # noqa: F811
    """MySQL text may hold U+0000, which PostgreSQL cannot store: it becomes U+FFFD (ids stay distinct)."""
    database, conn = scratch_mysql
    await add_actions(conn, database, ("n1", "a\x00b", "1.00", "2024-02-01 08:00:00"),
                      ("u\x00", "ok", "1.00", "2024-02-01 08:00:01"))
    key = await make_key("admin,read")
    created = await create(client, key, mysql_source(database, table="actions", event_name="noted"))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    got = {e["user_id"]: e["properties"]["action"] for e in await events(client, key, "noted")}
    assert got == {"n1": "a\ufffdb", "u\ufffd": "ok"}


async def _gated_import(client, key: str, scratch: tuple, monkeypatch, user_id: str, rows: int, gate: str,
                        shut: str, query: str) -> tuple[dict, dict]:
    """A one-time import (pages of 3) of `rows` rows of `items` (id, user_id), read by `query`, which fails at a
    row while the one-row table `gate` (column `gate`, value `shut`) says so: the source made and its first
    sync's end."""
    database, conn, port = scratch
    monkeypatch.setattr("app.sources.sql.PAGE", 3)
    await conn.execute("CREATE TABLE items (id int, user_id text)")
    await conn.execute(f"INSERT INTO items SELECT g, {user_id} FROM generate_series(1, {rows}) g")
    await conn.execute(f"CREATE TABLE gate ({gate})")
    await conn.execute(f"INSERT INTO gate VALUES ({shut})")
    created = await create(client, key, pg_source(database, port, table=None, cursor_column=None, query=query,
                                                  timestamp_column=None, event_name="item_added"))
    return created, await wait_status(client, key, created["id"], "active", "error")


async def test_a_one_time_import_cut_short_imports_the_rest_once(client, make_key, scratch_pg, pool, monkeypatch):  # noqa: F811
    """Without cursor_column, a sync cut short keeps the pages it committed; the next sync imported the whole
    table again, so those rows became two events each."""
    _, conn, _ = scratch_pg
    key = await make_key("admin,read")
    # Row 7 fails the query while the gate is shut: the rows read before it are committed, page by page.
    created, body = await _gated_import(
        client, key, scratch_pg, monkeypatch, "'i' || g", 10, "open boolean", "false",
        "SELECT id, user_id, 1 / CASE WHEN id = 7 AND NOT (SELECT open FROM gate) THEN 0 ELSE 1 END AS one FROM items")
    assert body["status"] == "error" and "division by zero" in body["status_reason"], body
    assert sorted(e["user_id"] for e in await events(client, key, "item_added")) == [f"i{n}" for n in range(1, 7)]

    await conn.execute("UPDATE gate SET open = true")
    body = await sync(client, key, created["id"])
    assert body["status"] == "active", body
    users = [e["user_id"] for e in await events(client, key, "item_added")]
    assert sorted(users) == sorted(f"i{n}" for n in range(1, 11))
    assert body["rows_imported"] == 10
    # Done: what kept the committed rows apart is dropped, and later syncs import nothing.
    for table in ("data_source_import_digests", "data_source_import_rows"):
        assert await pool.fetchval(f"SELECT count(*) FROM {table} WHERE source_id = $1", created["id"]) == 0
    body = await sync(client, key, created["id"])
    assert len(await events(client, key, "item_added")) == 10 and body["rows_imported"] == 10


async def test_a_resumed_one_time_import_reads_the_kept_digests_a_page_at_a_time(
        client, make_key, scratch_pg, pool, monkeypatch):  # noqa: F811
    """The resume of a one-time import cut short read every digest its pages had kept at once (memory as large as
    the rows imported before the cut); it asks PostgreSQL about each page's rows instead. Identical rows each
    count, a pair of them split by each cut, and an import cut twice resumes as well the second time."""
    _, conn, _ = scratch_pg
    key = await make_key("admin,read")
    # Rows alike in pairs (the query leaves id out): i0, i1, i1, i2, i2, ... i15. The first cut is at row 13
    # (i6, whose twin row 12 is committed before it), the second at row 25 (i12, twin of row 24).
    created, body = await _gated_import(
        client, key, scratch_pg, monkeypatch, "'i' || (g / 2)", 30, "cut int", "13",
        "SELECT user_id, 1 / CASE WHEN id = (SELECT cut FROM gate) THEN 0 ELSE 1 END AS one FROM items")
    assert body["status"] == "error"
    assert len(await events(client, key, "item_added")) == 12  # four pages committed

    digests_per_read: list[int] = []
    fetch = asyncpg.Connection.fetch

    async def counting_fetch(self, query, *args, **kwargs):
        rows = await fetch(self, query, *args, **kwargs)
        if "data_source_import" in query:  # a read of the kept digests: how many it brought back
            digests_per_read.append(sum(len(v) // 8 for row in rows for v in row.values() if isinstance(v, bytes)))
        return rows

    monkeypatch.setattr(asyncpg.Connection, "fetch", counting_fetch)
    await conn.execute("UPDATE gate SET cut = 25")
    body = await sync(client, key, created["id"])
    assert body["status"] == "error", body
    assert len(await events(client, key, "item_added")) == 24  # four pages more, none of the first twelve again
    await conn.execute("UPDATE gate SET cut = 0")
    body = await sync(client, key, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 30, body
    expected = sorted(f"i{n // 2}" for n in range(1, 31))
    assert sorted(e["user_id"] for e in await events(client, key, "item_added")) == expected
    assert digests_per_read and max(digests_per_read) <= 3, digests_per_read  # a page's rows at most
