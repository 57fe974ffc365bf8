"""Custom SQL reports: results, the row cap, and escape attempts that must fail."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from app.appkeys import REPORT_POOL
from tests.conftest import bearer
from tests.reports_support import create_report, run_report, seed, set_plan, workspace_id


@pytest.fixture
async def sandbox(make_client, settings, make_key, pool, workspace, database_url):
    client = await make_client(dataclasses.replace(settings, custom_sql_timeout_seconds=0.5,
                                                         custom_sql_max_rows=5, key_cache_seconds=0))
    key = await make_key("read,write")
    other_ws = f"{workspace}-victim"
    await make_key("read", workspace_name=other_ws)
    await set_plan(database_url, workspace, "enterprise")
    ws, victim = await workspace_id(database_url, workspace), await workspace_id(database_url, other_ws)
    await seed(pool, ws, [("signup", "mine1", "2024-03-01T10:00:00Z", {"plan": "pro"}),
                          ("signup", "mine2", "2024-03-01T11:00:00Z")])
    await seed(pool, ws, [("signup", "my-test-env", "2024-03-01T10:00:00Z")], env="test")
    await seed(pool, victim, [("signup", "victim", "2024-03-01T10:00:00Z", {"secret": "x"})])

    async def run_sql(sql: str, status: int = 200) -> dict:
        report = await create_report(client, key, {"name": "SQL", "type": "custom", "config": {"sql": sql}})
        return await run_report(client, key, report["id"], status=status)

    return client, key, run_sql, victim


async def test_custom_sql_sees_its_own_workspace_and_env(sandbox):
    _, _, run_sql, _ = sandbox
    result = await run_sql(
        "SELECT user_id, properties->>'plan' AS plan, timestamp FROM events ORDER BY user_id;")
    assert result["columns"] == ["user_id", "plan", "timestamp"]
    assert [r[:2] for r in result["rows"]] == [["mine1", "pro"], ["mine2", None]]
    assert result["truncated"] is False
    empty = await run_sql("SELECT event, count(*) AS n, count(*) AS n FROM events WHERE false GROUP BY event")
    assert empty["columns"] == ["event", "n", "n"] and empty["rows"] == []


async def test_json_columns_come_back_as_json_objects(sandbox):
    """properties and traits are objects, nested ones too, as GET /v1/events shows them (they came back as
    lists of pairs); arrays stay arrays, even of pairs; only the row itself is read as ordered pairs, so a
    row's duplicate column names each keep their value."""
    _, _, run_sql, _ = sandbox
    result = await run_sql("SELECT user_id, properties FROM events ORDER BY user_id")
    assert result["rows"] == [["mine1", {"plan": "pro"}], ["mine2", {}]]
    nested = await run_sql("""SELECT '{"a": {"b": [{"c": 1}, 2]}, "d": {}}'::jsonb AS j, 1 AS n, 2 AS n""")
    assert nested["columns"] == ["j", "n", "n"]
    assert nested["rows"] == [[{"a": {"b": [{"c": 1}, 2]}, "d": {}}, 1, 2]]
    shapes = await run_sql("SELECT '[[\"a\", 1]]'::jsonb AS pairs, '{\"x\": {\"y\": [1, {\"z\": null}]}}'::json AS j")
    assert shapes["rows"] == [[[["a", 1]], {"x": {"y": [1, {"z": None}]}}]]


async def test_columns_of_types_the_driver_looks_up(sandbox):
    """Arrays, ranges and composite types make the driver look their types up while describing, which set
    jit off with set_config(): refused to the report role since migration 0027, so the describing is done
    as the service role first (it only parses, nothing runs), then as the reader."""
    _, _, run_sql, _ = sandbox
    result = await run_sql("SELECT array[1, null, 3] AS a, '{}'::int[] AS e, int4range(1, 5) AS r, "
                           "array[row(1, 'x')] AS c")
    assert result["columns"] == ["a", "e", "r", "c"]
    assert result["rows"] == [[[1, None, 3], [], "[1,5)", [{"f1": 1, "f2": "x"}]]]


async def test_row_cap_truncates(sandbox):
    _, _, run_sql, _ = sandbox
    result = await run_sql("SELECT g FROM generate_series(1, 100) g")
    assert result["rows"] == [[1], [2], [3], [4], [5]]
    assert result["truncated"] is True


@pytest.mark.parametrize("sql", [
    "SELECT id, user_id, properties FROM public.events",
    "SELECT * FROM events e JOIN users u ON true",
    "SELECT * FROM events WHERE user_id = 'victim'",
    "SELECT count(*) FROM users",
])
async def test_other_workspaces_rows_stay_invisible(sandbox, sql):
    _, _, run_sql, victim = sandbox
    resp = await run_sql(sql.replace("{victim}", str(victim)))
    flat = repr(resp["rows"])
    assert "victim" not in flat and "my-test-env" not in flat
    if "AS n" in sql:
        assert resp["rows"][0][-1] == 0


@pytest.mark.parametrize(("sql", "reason"), [
    ("INSERT INTO events (id) VALUES ('x')", "syntax"),
    ("UPDATE events SET name = 'x'", "syntax"),
    ("DELETE FROM events", "syntax"),
    ("CREATE TABLE pwned (x int)", "syntax"),
    ("WITH d AS (DELETE FROM events RETURNING 1) SELECT * FROM d", "WITH clause"),
    ("SELECT 1; DELETE FROM events", "syntax error"),
    ("SELECT 1) q; DELETE FROM events; SELECT (1", "multiple commands"),
    ("SELECT * FROM api_keys", "does not exist"),
    ("SELECT * FROM public.api_keys", "permission denied"),
    ("SELECT * FROM public.events", "permission denied"),  # only the report columns are granted
    ("SELECT * FROM public.accounts", "permission denied"),
    ("SELECT * FROM public.report_scope_secret", "permission denied"),
    ("SELECT * FROM pg_authid", "permission denied"),
    ("SELECT * FROM pg_shadow", "permission denied"),
    # No setting can be changed (security walk-through: work_mem let one run take gigabytes of the shared
    # server's memory); forging the scope settings was already answered by their signature.
    ("SELECT set_config('role', 'postgres', true)", "permission denied for function set_config"),
    ("SELECT set_config('session_authorization', 'postgres', true)", "permission denied for function set_config"),
    ("SELECT set_config('tally.workspace_id', '{victim}', true) AS s, (SELECT count(*) FROM events) AS n",
     "permission denied for function set_config"),
    ("SELECT x.* FROM (SELECT set_config('work_mem', '8GB', true)) s, LATERAL (SELECT count(*) FROM events) x",
     "permission denied for function set_config"),
    ("SELECT pg_catalog.set_config('statement_timeout', '0', false)", "permission denied for function set_config"),
    ("SELECT query_to_xml('SET work_mem = ''8GB''', false, false, '')", "not allowed"),
    ("RESET ROLE", "syntax"),
    ("SET ROLE postgres", "syntax"),
    ("SELECT public.tally_report_enter_scope(1, 'live')", "permission denied"),
    ("SELECT public.tally_report_scope_sig(1, 'live')", "permission denied"),
    ("SELECT pg_read_file('/etc/passwd')", "permission denied"),
])
async def test_escapes_fail(sandbox, pool, sql, reason):
    _, _, run_sql, victim = sandbox
    error = (await run_sql(sql.replace("{victim}", str(victim)), status=400))["error"]
    assert error["code"] == "invalid_sql"
    assert reason in error["message"], error
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT to_regclass('public.pwned')") is None
        assert await conn.fetchval("SELECT count(*) FROM events WHERE workspace_id = $1", victim) == 1


async def test_sleep_beyond_the_timeout_is_504(sandbox):
    _, _, run_sql, _ = sandbox
    for sql in ("SELECT pg_sleep(30)", "SELECT pg_sleep(1) FROM generate_series(1, 30)"):
        error = (await run_sql(sql, status=504))["error"]
        assert error["code"] == "report_timeout"


async def test_the_connection_is_clean_afterwards(sandbox):
    # Role and scope are transaction-local: pooled connections go back to the service's own role.
    client, key, run_sql, _ = sandbox
    await run_sql("SELECT 1 AS one")
    await run_sql("SELECT set_config('role', 'postgres', true)", status=400)
    assert (await client.get("/v1/reports", headers=bearer(key))).status == 200
    async with client.app[REPORT_POOL].acquire() as conn:
        assert await conn.fetchval("SELECT current_setting('tally.workspace_id', true)") in (None, "")
        assert await conn.fetchval("SELECT current_user") == await conn.fetchval("SELECT session_user")


async def test_plan_downgrade_blocks_runs(sandbox, database_url, workspace):
    client, key, _, _ = sandbox
    report = await create_report(client, key, {"name": "SQL", "type": "custom", "config": {"sql": "SELECT 1"}})
    await set_plan(database_url, workspace, "pro")
    error = (await run_report(client, key, report["id"], status=403))["error"]
    assert error["code"] == "plan_required"


# --- result caps and statistics (issue 10, item 4) -------------------------------------------------------

async def test_result_past_the_byte_cap_is_413_without_fetching_it(make_client, settings, make_key, database_url,
                                                                   workspace):
    client = await make_client(dataclasses.replace(settings, custom_sql_max_bytes=64 * 1024,
                                                   custom_sql_max_rows=100_000, key_cache_seconds=0))
    key = await make_key("read,write")
    await set_plan(database_url, workspace, "enterprise")
    for sql in ("SELECT g, repeat('x', 1000) AS pad FROM generate_series(1, 1000) g",  # ~1 MB over many rows
                "SELECT repeat('x', 10000000) AS one_huge_cell"):                       # one 10 MB row
        report = await create_report(client, key, {"name": "big", "type": "custom", "config": {"sql": sql}})
        error = (await run_report(client, key, report["id"], status=413))["error"]
        assert error["code"] == "result_too_large"
        assert "65536 bytes" in error["message"]
    # Just under the cap still answers whole.
    report = await create_report(client, key, {"name": "ok", "type": "custom", "config": {
        "sql": "SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 100) g"}})
    body = await run_report(client, key, report["id"])
    assert len(body["rows"]) == 100 and body["truncated"] is False


@pytest.mark.parametrize("sql", [
    "SELECT relname, n_live_tup FROM pg_stat_user_tables",
    "SELECT relname, n_tup_ins FROM pg_catalog.pg_stat_all_tables",
    "SELECT * FROM pg_statio_user_tables",
    "SELECT tablename, most_common_vals::text FROM pg_stats",
    "SELECT relname, reltuples FROM pg_class",
    "SELECT pg_stat_get_live_tuples(oid) FROM pg_class WHERE relname = 'events'",
    "SELECT pg_total_relation_size('public.events'::regclass)",
    "SELECT query_to_xml('SELECT n_live_tup FROM pg_stat_user_tables', false, false, '')",
])
async def test_statistics_are_hidden_from_custom_sql(sandbox, sql):
    _, _, run_sql, _ = sandbox
    error = (await run_sql(sql, status=400))["error"]
    assert error["code"] == "invalid_sql" and "permission denied" in error["message"], error
    # Catalog names stay readable; only the estimates are hidden.
    result = await run_sql("SELECT relname FROM pg_class WHERE relname = 'events' AND relkind = 'v'")
    assert result["rows"] == [["events"]]


async def test_statistics_migration_applies_on_postgresql_18(customer_pg_dsn):
    """The customer test server is the embedded PostgreSQL 18: migrate a fresh database there."""
    import secrets
    from urllib.parse import urlparse

    from storage.migrate import migrate

    name = f"tally_pg18_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(customer_pg_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(urlparse(customer_pg_dsn)._replace(path=f"/{name}").geturl())
    try:
        assert await conn.fetchval("SHOW server_version_num") >= "180000"
        await migrate(conn)
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE tally_report_reader")
            for sql in ("SELECT count(*) FROM pg_stat_user_tables", "SELECT reltuples FROM pg_class LIMIT 1",
                        "SELECT count(*) FROM pg_stats", "SELECT count(*) FROM pg_locks",
                        "SELECT count(*) FROM pg_database", "SELECT current_setting('port')"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    async with conn.transaction():
                        await conn.fetchval(sql)
            assert await conn.fetchval("SELECT count(relname) > 0 FROM pg_class") is True
        assert await conn.fetchval("SELECT count(*) >= 0 FROM pg_stat_user_tables") is True  # the service still can
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


# --- what the server knows beyond the two views (migration 0038) -----------------------------------------

CLUSTER_FACTS = [
    # other sessions' locks: a keyed flush holds the erasure lock of its workspace, so these named who ingests
    "SELECT locktype, classid, objid FROM pg_locks",
    "SELECT locktype, objid FROM pg_lock_status()",
    "SELECT pg_blocking_pids(1)",
    "SELECT gid FROM pg_prepared_xacts",
    "SELECT slot_name FROM pg_replication_slots",
    # the server's other databases and roles, their settings and comments
    "SELECT datname FROM pg_database",
    "SELECT rolname, rolsuper FROM pg_roles",
    "SELECT usename FROM pg_user",
    "SELECT setconfig FROM pg_db_role_setting",
    "SELECT roleid, member FROM pg_auth_members",
    "SELECT description FROM pg_shdescription",
    "SELECT pg_get_userbyid(10)",
    "SELECT spcname, pg_tablespace_location(oid) FROM pg_tablespace",
    # its configuration, addresses and restarts
    "SELECT name, setting FROM pg_settings",
    "SELECT current_setting('listen_addresses')",
    "SELECT current_setting('port', true)",
    "SELECT inet_server_addr(), inet_server_port()",
    "SELECT inet_client_addr()",
    "SELECT pg_postmaster_start_time()",
    "SELECT pg_conf_load_time()",
]


@pytest.mark.parametrize("sql", CLUSTER_FACTS)
async def test_the_servers_locks_databases_roles_and_settings_are_hidden_from_custom_sql(sandbox, sql):
    _, _, run_sql, _ = sandbox
    error = (await run_sql(sql, status=400))["error"]
    assert error["code"] == "invalid_sql" and "permission denied" in error["message"], error
    # The scope the reader's row-level security reads (current_setting, as its functions' owner) still holds.
    assert (await run_sql("SELECT count(*) AS n FROM events"))["rows"] == [[2]]


async def test_monitoring_and_backup_roles_still_read_the_servers_facts(pool):
    """Granted back to pg_monitor (monitoring agents read databases, settings and locks) and pg_read_all_data (a
    read-all role's pg_dump reads roles, databases and settings); the suite's service role is a superuser."""
    async with pool.acquire() as conn:
        for role in ("pg_monitor", "pg_read_all_data"):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {role}")
                assert await conn.fetchval("SELECT count(*) > 0 FROM pg_database") is True
                assert await conn.fetchval("SELECT count(*) > 0 FROM pg_roles") is True
                assert await conn.fetchval("SELECT count(*) >= 0 FROM pg_locks") is True
                assert await conn.fetchval("SELECT current_setting('port') <> ''") is True
            async with conn.transaction():
                await conn.execute("SET LOCAL ROLE tally_report_reader")  # the same reads, refused to the reader
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.fetchval("SELECT count(*) FROM pg_database")


# --- locks the service takes (security walk-through F1) --------------------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT pg_advisory_xact_lock({victim}, 0)",            # the erasure lock every keyed flush takes shared
    "SELECT pg_advisory_lock({victim}, 0)",
    "SELECT pg_advisory_xact_lock_shared({victim}, 0)",
    "SELECT pg_try_advisory_xact_lock(7264002, 1)",          # the analytics mirror's lock
    "SELECT pg_try_advisory_lock(hashtext('tally_event_partitions'))",
    "SELECT pg_advisory_lock(7264001)",                      # migrations
])
async def test_custom_sql_cannot_take_advisory_locks(sandbox, pool, sql):
    """Custom SQL holding one of the service's advisory locks for its 5 s stopped another workspace's
    ingestion (and every analytics read behind the mirror's lock): the functions are not the reader's."""
    _, _, run_sql, victim = sandbox
    error = (await run_sql(sql.replace("{victim}", str(victim)), status=400))["error"]
    assert error["code"] == "invalid_sql" and "permission denied for function pg_" in error["message"], error
    async with pool.acquire() as conn:  # the service itself still takes them
        assert await conn.fetchval("SELECT pg_try_advisory_lock($1, 0)", victim) is True
        await conn.execute("SELECT pg_advisory_unlock($1, 0)", victim)


async def test_timestamps_are_written_as_the_rest_of_the_api_writes_them(sandbox):
    """A timestamptz cell is UTC with Z and milliseconds, as GET /v1/events lists the same event (PostgreSQL's
    JSON wrote +00:00 and microseconds, in the session's zone), with microseconds kept when the value has
    them: the customer's own SQL made them, and an equality on the value must still match it. Text and JSON
    that look like times, and times without a zone (a wall-clock time the SQL made), stay as they are."""
    client, key, run_sql, _ = sandbox
    result = await run_sql("SELECT user_id, timestamp FROM events ORDER BY user_id")
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert result["rows"] == sorted([e["user_id"], e["timestamp"]] for e in listed["data"])
    assert result["rows"][0] == ["mine1", "2024-03-01T10:00:00.000Z"]
    result = await run_sql(
        "SELECT '2024-03-01 10:00:00.123456+00'::timestamptz AS exact, '2024-03-01 12:00:00.5+02'::timestamptz AS ms,"
        " array['2024-03-01 10:00:00+00', null]::timestamptz[] AS arr, 'infinity'::timestamptz AS inf,"
        " '2024-03-01 10:00:00.123456'::timestamp AS naive, '2024-03-01'::date AS d,"
        " '2024-03-01T10:00:00+00:00' AS txt, '{\"t\": \"2024-03-01T10:00:00+00:00\"}'::jsonb AS j")
    assert result["rows"] == [["2024-03-01T10:00:00.123456Z", "2024-03-01T10:00:00.500Z",
                               ["2024-03-01T10:00:00.000Z", None], "infinity", "2024-03-01T10:00:00.123456",
                               "2024-03-01", "2024-03-01T10:00:00+00:00", {"t": "2024-03-01T10:00:00+00:00"}]]
    exact = await run_sql("SELECT count(*) AS n FROM events WHERE timestamp = '2024-03-01T10:00:00.000Z'")
    assert exact["rows"] == [[1]]
