"""The `tally` command line, as other tools call it."""

import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests import server_process
from tests.conftest import bearer
from tests.server_process import free_port


def tally(database_url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    # A data folder of the test's (the development secret is made there), not the checkout's ./.tally-data.
    env = {**os.environ, "DATABASE_URL": database_url, "TALLY_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def cli(database_url, client, tmp_path):  # client: the schema exists
    return lambda *args: tally(database_url, tmp_path, *args)


async def test_create_key_prints_the_key_alone_and_it_works(cli, client, workspace):
    done = cli("create-key", "--workspace", workspace, "--scopes", "read,write", "--name", "ci")
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert done.stdout == key + "\n" and key.startswith("tally_live_sk_")
    assert (await client.get("/v1/events", headers=bearer(key))).status == 200
    test_key = cli("create-key", "--workspace", workspace, "--scopes", "read", "--test").stdout.strip()
    assert test_key.startswith("tally_test_sk_")


def test_list_keys_never_prints_values_and_revoke_works(cli, workspace):
    key = cli("create-key", "--workspace", workspace, "--scopes", "admin", "--name", "ops").stdout.strip()
    listing = cli("list-keys", "--workspace", workspace)
    assert listing.returncode == 0 and "ops" in listing.stdout
    assert key not in listing.stdout and key[18:] not in listing.stdout
    key_id = listing.stdout.splitlines()[1].split("\t")[0]
    assert key_id.startswith("key_")
    assert cli("revoke-key", key_id).returncode == 0
    assert cli("revoke-key", key_id).returncode == 1
    revoked_at = cli("list-keys", "--workspace", workspace).stdout.splitlines()[1].split("\t")[6]
    assert revoked_at != "-"


def test_bad_arguments_fail_clearly(cli, workspace):
    bad = cli("create-key", "--workspace", workspace, "--scopes", "root")
    assert bad.returncode == 2 and "scopes" in bad.stderr
    assert cli("create-key", "--workspace", workspace, "--scopes", "read", "--expires", "soon").returncode == 2
    assert cli("set-plan", "--workspace", workspace, "--plan", "gold").returncode == 2
    assert cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", "events=x").returncode == 2


async def test_set_plan_with_custom_limits_applies(cli, client, workspace):
    key = cli("create-key", "--workspace", workspace, "--scopes", "read").stdout.strip()
    done = cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", "query=2/50")
    assert done.returncode == 0, done.stderr
    statuses = [(await client.get("/v1/events", headers=bearer(key))).status for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_migrate_and_create_user(cli, workspace):
    assert cli("migrate").returncode == 0
    done = cli("create-user", "--workspace", workspace, "--email", "ops@example.com", "--password", "long enough pw")
    assert done.returncode == 0, done.stderr


async def test_migrate_says_which_migrations_it_applied(pg_admin_dsn, tmp_path):
    """An operator upgrading runs `tally migrate` and reads what it did: it said "database schema is up to date"
    whether it had just applied sixteen migrations or none (found in an upgrade walk-through)."""
    import asyncpg

    from storage.migrate import available, migrate
    from tests.test_analytics_durability import drop_database, fresh_database

    dsn = await fresh_database(pg_admin_dsn)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn, upto=34)  # a database of an older release
        finally:
            await conn.close()
        pending = [f"{v:04d}_{name}" for v, name, _ in available() if v > 34]
        done = tally(dsn, tmp_path, "migrate")
        assert done.returncode == 0, done.stderr
        said = [f"applied migration {p}" for p in pending] + ["database schema is up to date"]
        assert done.stdout.splitlines() == said
        again = tally(dsn, tmp_path, "migrate")
        assert again.returncode == 0 and again.stdout == "database schema is up to date\n"
    finally:
        await drop_database(pg_admin_dsn, dsn)


async def _database_at(pg_admin_dsn: str, upto: int | None, extra_version: int | None = None) -> str:
    """A database of its own migrated up to `upto` (None: none at all), with `extra_version` in its ledger as
    a newer release would leave it."""
    import asyncpg

    from storage.migrate import migrate
    from tests.test_analytics_durability import fresh_database

    dsn = await fresh_database(pg_admin_dsn)
    if upto is not None:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn, upto=upto)
            if extra_version is not None:
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future')",
                                   extra_version)
        finally:
            await conn.close()
    return dsn


async def _ledger(dsn: str) -> list[int]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")]
    finally:
        await conn.close()


async def test_a_command_does_not_migrate_a_database_an_older_release_uses(pg_admin_dsn, tmp_path):
    """`tally create-key` (or any command but `migrate` and `serve`) from a new install, with the older
    release's server still running on the database, migrated it under that server, whose mirror then failed
    every round and whose reports answered 500 (upgrade walk-through): it now refuses, changing nothing."""
    from storage.migrate import available
    from tests.test_analytics_durability import drop_database

    dsn = await _database_at(pg_admin_dsn, upto=34)
    try:
        before = await _ledger(dsn)
        pending = ", ".join(f"{v:04d}_{name}" for v, name, _ in available() if v > 34)
        for args in (("create-key", "--workspace", "acme", "--scopes", "read"), ("list-keys", "--workspace", "acme"),
                     ("analytics", "status")):
            done = tally(dsn, tmp_path, *args)
            assert done.returncode == 1, done
            assert done.stderr == (f"start-up error: the database schema is older than this release ("
                                   f"{len(available()) - len(before)} migrations pending: {pending}); run `tally "
                                   "migrate`, or start `tally serve`, which migrates at start, once the servers of "
                                   "the older release are stopped\n"), done.stderr
            assert done.stdout == ""
        assert await _ledger(dsn) == before
        assert tally(dsn, tmp_path, "migrate").returncode == 0
        done = tally(dsn, tmp_path, "create-key", "--workspace", "acme", "--scopes", "read")
        assert done.returncode == 0 and done.stdout.startswith("tally_live_sk_"), done
    finally:
        await drop_database(pg_admin_dsn, dsn)


async def test_a_command_migrates_a_new_database(pg_admin_dsn, tmp_path):
    """Nothing older can be using a database without a schema: the first command sets it up, as before."""
    from storage.migrate import available
    from tests.test_analytics_durability import drop_database

    dsn = await _database_at(pg_admin_dsn, upto=None)
    try:
        done = tally(dsn, tmp_path, "create-key", "--workspace", "acme", "--scopes", "read")
        assert done.returncode == 0 and done.stdout.startswith("tally_live_sk_"), done
        assert await _ledger(dsn) == [v for v, _, _ in available()]
    finally:
        await drop_database(pg_admin_dsn, dsn)


async def test_a_database_a_newer_release_migrated_is_refused(pg_admin_dsn, tmp_path):
    """This release's SQL would meet a schema it does not know: every command, `migrate` and `serve` included,
    stops with one line naming the unknown migration, and changes nothing."""
    from tests.test_analytics_durability import drop_database

    dsn = await _database_at(pg_admin_dsn, upto=34, extra_version=9999)
    said = ("start-up error: the database was migrated by a newer release of Tally (migration 9999 is unknown to "
            "this one): run that release, or restore a backup taken before the upgrade\n")
    try:
        before = await _ledger(dsn)
        for args in (("create-key", "--workspace", "acme", "--scopes", "read"), ("migrate",)):
            done = tally(dsn, tmp_path, *args)
            assert (done.returncode, done.stdout, done.stderr) == (1, "", said), done
        done = serve({"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path), "TALLY_SECRET": "s" * 32},
                     "--port", str(free_port()))
        assert done.returncode == 1, done
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert await _ledger(dsn) == before
    finally:
        await drop_database(pg_admin_dsn, dsn)


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`tally serve` with `env` over this process's environment; for settings it refuses, so it exits."""
    return subprocess.run([sys.executable, "-m", "app", "serve", *args], capture_output=True, text=True,
                          env={**os.environ, "REDIS_URL": "", "TALLY_DATA_DIR": tempfile.mkdtemp(), **env},
                          timeout=120)


@pytest.mark.parametrize(("env", "code", "says"), [
    ({"DATABASE_URL": "garbage"}, 2, "configuration error: DATABASE_URL is not a usable PostgreSQL URL: "),
    ({"DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:1/x"}, 1,
     "start-up error: cannot connect to PostgreSQL at 127.0.0.1:1/x (DATABASE_URL): "),
    ({"DATABASE_URL": "{pg}/tally_no_such_database"}, 2,
     'configuration error: PostgreSQL at {place}/tally_no_such_database (DATABASE_URL): database '
     '"tally_no_such_database" does not exist; create it first'),
    ({"TALLY_DB_POOL_MAX": "0"}, 2, "configuration error: TALLY_DB_POOL_MAX must be at least 1, got '0'"),
    ({"PORT": "99999"}, 2, "configuration error: PORT must be between 1 and 65535, got '99999'"),
    ({"HOST": "no.such.host.invalid"}, 2, "configuration error: HOST 'no.such.host.invalid' cannot be resolved"),
    ({"TALLY_DATA_DIR": "/proc/tally", "TALLY_SECRET": ""}, 2,
     "configuration error: TALLY_DATA_DIR /proc/tally is not a usable folder"),
    ({"TALLY_ANALYTICS_DIR": "/proc/tally/analytics"}, 2,
     "configuration error: TALLY_ANALYTICS_DIR /proc/tally/analytics is not a usable folder"),
    ({"TALLY_ANALYTICS_URL": "garbage"}, 2,
     "configuration error: TALLY_ANALYTICS_URL must be a URL with a scheme and a host"),
    ({"REDIS_URL": "secretpw@127.0.0.1:6379"}, 2,
     "configuration error: REDIS_URL must be a redis://, rediss:// or unix:// URL"),
    ({"TALLY_ANALYTICS_DATABASE": "tally-prod"}, 2,
     "configuration error: TALLY_ANALYTICS_DATABASE must be a ClickHouse name"),
    ({"TALLY_ACCESS_LOG": "quiet"}, 2, "configuration error: TALLY_ACCESS_LOG must be 1 or 0"),
    ({"TALLY_ANALYTICS_URL": "http://default:secretpw@127.0.0.1:1"}, 1,
     "start-up error: cannot use the ClickHouse server at http://127.0.0.1:1 (TALLY_ANALYTICS_URL): "),
])
def test_start_up_errors_are_one_clear_line_without_a_traceback(database_url, tmp_path, env, code, says):
    pg = database_url.rsplit("/", 1)[0]
    place = pg.rsplit("@", 1)[1]
    env = {"DATABASE_URL": database_url, "TALLY_DATA_DIR": str(tmp_path), "TALLY_SECRET": "s" * 32,
           **{k: v.format(pg=pg) for k, v in env.items()}}
    done = serve(env) if "PORT" in env else serve(env, "--port", str(free_port()))
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "secretpw" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith(says.format(place=place)), done.stderr


def test_a_port_out_of_range_is_a_usage_error(database_url, tmp_path):
    done = tally(database_url, tmp_path, "serve", "--port", "70000")
    assert done.returncode == 2 and "a port is between 1 and 65535" in done.stderr


async def test_set_plan_refuses_a_workspace_that_does_not_exist(cli, workspace, database_url):
    done = cli("set-plan", "--workspace", workspace + "-typo", "--plan", "pro")
    assert done.returncode == 1 and done.stderr == f"no workspace named {workspace}-typo\n"
    assert cli("list-keys", "--workspace", workspace + "-typo").returncode == 1  # nothing was made
    cli("create-key", "--workspace", workspace, "--scopes", "read")
    done = cli("set-plan", "--workspace", workspace, "--plan", "pro")
    assert done.returncode == 0 and done.stdout == f"workspace {workspace}: plan pro\n"


def test_create_key_refuses_an_expiry_in_the_past(cli, workspace):
    done = cli("create-key", "--workspace", workspace, "--scopes", "read,write", "--expires", "2020-01-01T00:00:00Z")
    assert done.returncode == 2 and done.stdout == ""
    assert "2020-01-01T00:00:00Z is in the past" in done.stderr
    assert cli("list-keys", "--workspace", workspace).returncode == 1  # no key, so no workspace either
    done = cli("create-key", "--workspace", workspace, "--scopes", "read", "--expires", "2999-01-01T00:00:00Z")
    assert done.returncode == 0 and done.stdout.startswith("tally_live_sk_")


def test_create_key_refuses_an_expiry_no_utc_time_can_hold(cli, workspace):
    """The last second of 9999 at -14:00 is year 10000 in UTC: the key's insert failed with a traceback."""
    done = cli("create-key", "--workspace", workspace, "--scopes", "read", "--expires", "9999-12-31T23:59:59-14:00")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert "out of range" in done.stderr


def test_arguments_that_name_nothing_are_usage_errors_not_tracebacks(cli, workspace):
    # Bytes that are not UTF-8 (a terminal in another encoding) reached asyncpg as lone surrogates: a traceback.
    for args in (("list-keys", "--workspace", "caf\udce9"), ("revoke-key", "key_\udcff"),
                 ("create-user", "--workspace", workspace, "--email", "a@b\udcff.co", "--password", "long enough pw")):
        done = cli(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "is not valid UTF-8" in done.stderr
    # An empty name (`--workspace "$WS"` with WS unset) made a workspace named "".
    for name in ("", "   "):
        done = cli("create-key", "--workspace", name, "--scopes", "read")
        assert done.returncode == 2 and done.stdout == "" and "a workspace name cannot be empty" in done.stderr
        assert cli("list-keys", "--workspace", name).returncode == 2


@pytest.mark.parametrize(("since", "says"), [
    ("1999-12-31", "no event is older than 2000-01-01: run `tally analytics rebuild` without --since"),
    ("2999-01-01", "2999-01-01 is in the future: there is nothing to rebuild from it"),
])
def test_a_rebuild_since_a_day_no_event_can_have_is_refused(database_url, tmp_path, since, says):
    # Both reached ClickHouse as a date it cannot read, a traceback after the store was opened.
    done = tally(database_url, tmp_path, "analytics", "rebuild", "--since", since)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert says in done.stderr



class NotRedis(socketserver.BaseRequestHandler):
    def handle(self) -> None:  # a web server, as on a port mistyped in REDIS_URL
        self.request.recv(1024)
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")


def test_a_redis_this_configuration_cannot_use_is_a_configuration_error(database_url, redis_url):
    """A server that is not Redis made every request a 500 with a traceback in the log; a database the server
    does not have, or a refused login, was taken for an outage for as long as the server ran (rate limits and
    sessions per process, silently but for one log line). A Redis that does not answer still is an outage:
    Tally starts, on the fallback."""
    parsed = urlparse(redis_url)
    no_such_database = (parsed._replace(query="db=999") if parsed.scheme == "unix" else parsed._replace(path="/999"))
    with socketserver.TCPServer(("127.0.0.1", 0), NotRedis) as web_server:
        threading.Thread(target=web_server.serve_forever, daemon=True).start()
        for url, reason in ((no_such_database.geturl(), "DB index is out of range"),
                            (f"redis://127.0.0.1:{web_server.server_address[1]}/0", "Protocol error")):
            done = serve({"DATABASE_URL": database_url, "TALLY_SECRET": "s" * 32, "REDIS_URL": url},
                         "--port", str(free_port()))
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            last = done.stderr.splitlines()[-1]
            assert last.startswith("configuration error: REDIS_URL: ") and reason in last, done.stderr
            assert "answered, but not as a Redis this configuration can use: " in last
        web_server.shutdown()


def test_a_redis_that_does_not_answer_at_start_is_reported_at_start(database_url):
    """Tally starts on the fallback, as documented, but said nothing until the first request that needed Redis:
    a REDIS_URL with a mistyped port went unnoticed by an operator reading the start-up log or /metrics."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"  # bound, not listening: refused
        proc, base = server_process.start({"DATABASE_URL": database_url, "TALLY_SECRET": "s" * 32, "REDIS_URL": url})
        try:
            with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
                metrics = resp.read().decode()
            log = server_process.output(proc)
        finally:
            server_process.stop(proc)
    assert 'tally_dependency_outages_total{dependency="redis"} 1.0' in metrics
    assert "redis unreachable (ConnectionError: " in log and "fall back to process memory" in log


def test_a_damaged_embedded_analytics_store_is_one_start_up_error_line(database_url, tmp_path):
    """A store chDB cannot open (a damaged file, a partial copy) ended `tally serve` and `tally analytics status`
    in clickhouse-connect's traceback; it is `start-up error: …` naming the folder and the way out, exit 1."""
    assert tally(database_url, tmp_path, "analytics", "status").returncode == 0  # the store exists
    store = tmp_path / "analytics"
    (store / "metadata" / "tally.sql").write_text("ATTACH DATABASE tally ((\n")
    for done in (tally(database_url, tmp_path, "analytics", "status"),
                 serve({"DATABASE_URL": database_url, "TALLY_DATA_DIR": str(tmp_path), "TALLY_SECRET": "s" * 32},
                       "--port", str(free_port()))):
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        last = done.stderr.splitlines()[-1]
        assert last.startswith(f"start-up error: the embedded analytics store at {store} cannot be opened: "), last
        assert last.endswith("run `tally analytics rebuild`, which copies every event again from PostgreSQL"), last


def test_a_malformed_limit_is_reported_by_set_plan_with_its_own_usage(cli, workspace):
    # It printed the top-level usage (`usage: tally [-h] {serve,create-key,...}`), as if the command were wrong.
    done = cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", "events=fast")
    assert done.returncode == 2 and done.stderr.startswith("usage: tally set-plan "), done.stderr
    assert "argument --limit: limit must look like GROUP=PER_SECOND/PER_MINUTE" in done.stderr


@pytest.mark.parametrize(("limit", "says"), [
    ("events=0/0", "at least 1"), ("events=5/0", "at least 1"), ("events=0/100", "at least 1"),
    (f"events={2**53 + 1}/{2**53 + 1}", "at most 1000000000"), ("events=10/1000000001", "at most 1000000000"),
])
async def test_set_plan_refuses_a_limit_of_zero_or_past_the_bound(cli, client, workspace, limit, says):
    """events=0/0 blocked every call of the workspace (an operator meaning "no limit" shut it out), and a limit past
    2^53 made X-RateLimit-Remaining exceed X-RateLimit-Limit (the limiter counts in doubles). Both are exit 2 with
    the rule, and the plan stays as it was."""
    key = cli("create-key", "--workspace", workspace, "--scopes", "read,write").stdout.strip()
    done = cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit", limit)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert done.stderr.startswith("usage: tally set-plan "), done.stderr
    resp = await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "u"})
    assert resp.status == 200 and resp.headers["X-RateLimit-Limit"] == "1000"  # still free's allowance


async def test_the_largest_limit_keeps_the_rate_limit_headers_consistent(cli, client, workspace):
    key = cli("create-key", "--workspace", workspace, "--scopes", "read,write").stdout.strip()
    done = cli("set-plan", "--workspace", workspace, "--plan", "enterprise", "--limit",
               "events=1000000000/1000000000")
    assert done.returncode == 0, done.stderr
    resp = await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "u"})
    assert resp.status == 200
    assert resp.headers["X-RateLimit-Limit"] == "1000000000"
    assert resp.headers["X-RateLimit-Remaining"] == "999999999"
