"""The real server process killed with SIGKILL while it ingests and mirrors: once it is back, every event
committed in PostgreSQL is in the analytics store exactly once. Also the analytics CLI with the server
stopped, and its refusal while the server holds the embedded store."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from urllib.parse import urlparse

import aiohttp
import asyncpg
import pytest

from tests import server_process
from tests.conftest import bearer


def tally(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


async def fresh_database(admin_dsn: str) -> str:
    """A database of its own: its outbox must feed only this server's store."""
    name = f"tally_kill_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urlparse(admin_dsn)._replace(path=f"/{name}").geturl()


async def drop_database(admin_dsn: str, dsn: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{urlparse(dsn).path[1:]}" WITH (FORCE)')
    finally:
        await conn.close()


async def pending_once_caught_up(base: str, seconds: float = 60) -> int:
    """The running server's count of events not yet mirrored, polled from /readyz until it is 0 (or
    `seconds` have passed)."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{base}/readyz") as resp:
                pending = (await resp.json())["analytics"]["pending"]
            if pending == 0 or time.monotonic() > deadline:
                return pending
            await asyncio.sleep(0.1)


def status(env: dict[str, str]) -> dict:
    done = tally(env, "analytics", "status")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_kill_9_mid_ingest_loses_nothing_and_counts_nothing_twice(pg_admin_dsn, tmp_path):
    dsn = await fresh_database(pg_admin_dsn)
    env = {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path), "TALLY_MIRROR_INTERVAL_MS": "20"}
    try:
        made = await asyncio.to_thread(tally, env, "create-key", "--workspace", "kill", "--scopes", "read,write")
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        proc, base = await asyncio.to_thread(server_process.start, env)
        acked = 0
        enough = asyncio.Event()
        async with aiohttp.ClientSession() as http:
            async def sender(n: int) -> None:
                nonlocal acked
                for i in range(10_000):
                    batch = [{"event": "load", "user_id": f"u{n}-{i % 5}"} for _ in range(25)]
                    try:
                        async with http.post(f"{base}/v1/events/batch", headers=bearer(key),
                                             json={"events": batch}) as resp:
                            if resp.status == 200:
                                acked += 25
                                if acked >= 3000:  # well into ingesting and mirroring
                                    enough.set()
                    except aiohttp.ClientError:
                        return  # the process is gone

            senders = [asyncio.create_task(sender(n)) for n in range(4)]
            await asyncio.wait_for(enough.wait(), 120)
            proc.kill()
            await asyncio.gather(*senders)
        await asyncio.to_thread(proc.wait, 30)

        conn = await asyncpg.connect(dsn)
        try:
            committed = await conn.fetchval("SELECT count(*) FROM events")
        finally:
            await conn.close()
        assert committed >= acked >= 3000

        before = await asyncio.to_thread(status, env)  # the server is down: the CLI opens the store itself
        assert before["postgres_events"] == committed

        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            refused = await asyncio.to_thread(tally, env, "analytics", "status")
            assert refused.returncode == 3
            assert "is tally serve running?" in refused.stderr
            assert await pending_once_caught_up(base) == 0
        finally:
            await asyncio.to_thread(server_process.stop, proc)

        after = await asyncio.to_thread(status, env)
        assert after["pending"] == 0
        assert after["analytics_keyed_events"] == after["postgres_events"] == committed

        rebuilt = await asyncio.to_thread(tally, env, "analytics", "rebuild")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert f"rebuilt: {committed} events" in rebuilt.stdout
        assert (await asyncio.to_thread(status, env))["analytics_keyed_events"] == committed
    finally:
        await drop_database(pg_admin_dsn, dsn)


OLD_LAYOUT = """
import sys, clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
for view in ("site_events_in_mv", "keyed_events_in_mv"):
    client.command(f"DROP VIEW tally.{view}")
client.command("DROP TABLE tally.events_in")
client.command("INSERT INTO tally.keyed_events (workspace_id, env, name, ts, id, user_id, actor, properties) "
               "VALUES (1, 'live', 'stray', now64(6), 'evt_not_in_postgresql', 'u', 'u', '{}')")
client.close()
"""


async def test_a_store_of_the_old_layout_is_emptied_and_refilled_from_postgresql(pg_admin_dsn, tmp_path):
    """Stores written before `events_in` hashed visitors in Python: their rows must not mix with new ones."""
    dsn = await fresh_database(pg_admin_dsn)
    env = {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path), "TALLY_MIRROR_INTERVAL_MS": "20"}
    try:
        made = await asyncio.to_thread(tally, env, "create-key", "--workspace", "old", "--scopes", "read,write")
        assert made.returncode == 0, made.stderr
        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            async with aiohttp.ClientSession() as http:
                batch = [{"event": "seen", "user_id": f"u{i % 7}"} for i in range(40)]
                async with http.post(f"{base}/v1/events/batch", headers=bearer(made.stdout.strip()),
                                     json={"events": batch}) as resp:
                    assert resp.status == 200, await resp.text()
        finally:
            await asyncio.to_thread(server_process.stop, proc)
        assert (await asyncio.to_thread(status, env))["analytics_keyed_events"] == 40

        # Turn the store back into the layout of before, with one row PostgreSQL does not have.
        old = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", OLD_LAYOUT, str(tmp_path / "analytics")],
                                      capture_output=True, text=True, timeout=120)
        assert old.returncode == 0, old.stderr

        # Opened again (here by the CLI): emptied, stray row included, and every event queued again.
        upgraded = await asyncio.to_thread(tally, env, "analytics", "status")
        assert upgraded.returncode == 0, upgraded.stderr
        assert "40 events queued to mirror again" in upgraded.stderr
        assert (json.loads(upgraded.stdout)["pending"], json.loads(upgraded.stdout)["analytics_events"]) == (40, 0)

        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            assert await pending_once_caught_up(base) == 0
        finally:
            await asyncio.to_thread(server_process.stop, proc)
        after = await asyncio.to_thread(status, env)
        assert (after["pending"], after["analytics_keyed_events"], after["postgres_events"]) == (0, 40, 40)
    finally:
        await drop_database(pg_admin_dsn, dsn)


async def test_a_second_process_with_its_own_embedded_store_is_refused(pg_admin_dsn, tmp_path):
    """Each would mirror part of the outbox into its own store: both stores would miss events."""
    dsn = await fresh_database(pg_admin_dsn)
    first_env = {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path / "first")}
    second = [sys.executable, "-m", "app", "serve", "--port", str(server_process.free_port())]
    try:
        proc, _ = await asyncio.to_thread(server_process.start, first_env)
        try:
            refused = await asyncio.to_thread(
                subprocess.run, second, capture_output=True, text=True, timeout=120,
                env={**os.environ, "DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path / "second")})
        finally:
            await asyncio.to_thread(server_process.stop, proc)
        assert refused.returncode == 3, refused.stderr[-2000:]
        assert "already mirrors this database into its own embedded analytics store" in refused.stderr
        assert "Traceback" not in refused.stderr

        # Once the first has stopped, the claim is free: the second starts.
        proc, _ = await asyncio.to_thread(
            server_process.start, {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path / "second")})
        await asyncio.to_thread(server_process.stop, proc)
    finally:
        await drop_database(pg_admin_dsn, dsn)


@pytest.mark.parametrize("noticed_by", ["status", "server"])
async def test_a_rebuild_killed_midway_is_made_good(pg_admin_dsn, tmp_path, noticed_by):
    """`tally analytics rebuild` killed with SIGKILL after it emptied the store: the next `status` (or the
    server's first mirror round) notices and queues the missing events, and the server mirrors them, each
    once. The events were loaded straight into PostgreSQL (as a restore or an import would), so nothing but
    the rebuild brings them."""
    dsn = await fresh_database(pg_admin_dsn)
    (tmp_path / "tmp").mkdir()  # where the killed rebuild's spooled insert is left (and the server's files)
    env = {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path), "TALLY_MIRROR_INTERVAL_MS": "20",
           "TMPDIR": str(tmp_path / "tmp")}
    total = 300_000
    try:
        made = await asyncio.to_thread(tally, env, "create-key", "--workspace", "restored", "--scopes", "read")
        assert made.returncode == 0, made.stderr
        conn = await asyncpg.connect(dsn)
        try:
            workspace_id = await conn.fetchval("SELECT id FROM workspaces WHERE name = 'restored'")
            await conn.execute("INSERT INTO sites (id, workspace_id, domain, verification_token) "
                               "VALUES ('restored-site', $1, 'restored.example', 't')", workspace_id)
            await conn.execute("SELECT tally_ensure_event_partition(date_trunc('month', now() - interval '40 days'))"
                               " UNION ALL SELECT tally_ensure_event_partition(date_trunc('month', now()))")
            await conn.execute("ALTER TABLE events DISABLE TRIGGER USER")  # a restore: not in the outbox
            await conn.execute(
                "INSERT INTO events (id, workspace_id, env, site_id, name, session_id, ip_hash, path, ts, received_at) "
                "SELECT 'evt_r' || g, $1, 'live', 'restored-site', 'pageview', 'ses_' || (g / 4), 'v' || (g / 40), "
                "'/p/' || (g % 50), t, t FROM (SELECT g, now() - interval '40 days' * g / $2 AS t "
                "FROM generate_series(1, $2) AS g) s", workspace_id, total)
            await conn.execute("ALTER TABLE events ENABLE TRIGGER USER")
        finally:
            await conn.close()

        rebuild = await asyncio.create_subprocess_exec(sys.executable, "-m", "app", "analytics", "rebuild",
                                                       env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.DEVNULL)
        conn = await asyncpg.connect(dsn)
        try:  # killed once it stands in analytics_rebuilds, so once it may have emptied the store
            deadline = time.monotonic() + 60
            while not await conn.fetchval("SELECT count(*) FROM analytics_rebuilds") and rebuild.returncode is None:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            rebuild.kill()
            assert await rebuild.wait() == -9
        finally:
            await conn.close()

        if noticed_by == "status":
            short = await asyncio.to_thread(tally, env, "analytics", "status")
            assert short.returncode == 0, short.stderr
            assert f"an interrupted rebuild left the analytics store without {total} events" in short.stderr
            counts = json.loads(short.stdout)
            assert counts["postgres_events"] == total
            assert counts["analytics_events"] < total  # killed midway
            assert counts["pending"] == total  # queued again

        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            conn = await asyncpg.connect(dsn)
            try:  # the interrupted rebuild's row goes in the transaction that queues its events again
                deadline = time.monotonic() + 60
                while await conn.fetchval("SELECT count(*) FROM analytics_rebuilds"):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
            finally:
                await conn.close()
            assert await pending_once_caught_up(base) == 0
        finally:
            await asyncio.to_thread(server_process.stop, proc)
        after = status(env)
        assert (after["postgres_events"], after["analytics_site_events"], after["pending"]) == (total, total, 0)
    finally:
        await drop_database(pg_admin_dsn, dsn)


async def test_a_store_is_refused_with_another_database_until_rebuilt_for_it(pg_admin_dsn, tmp_path):
    """DATABASE_URL changed, TALLY_DATA_DIR (so the embedded store) kept: the store counted the first
    database's events on the second one's dashboards. Now the server and the CLI refuse it with what to do,
    and `tally analytics rebuild` makes it the second database's."""
    first, second = await fresh_database(pg_admin_dsn), await fresh_database(pg_admin_dsn)
    env = {"DATABASE_URL": first, "TALLY_DATA_DIR": str(tmp_path), "TALLY_MIRROR_INTERVAL_MS": "20"}
    moved = {**env, "DATABASE_URL": second}

    async def serve_and_send(env: dict[str, str], events: int) -> None:
        made = await asyncio.to_thread(tally, env, "create-key", "--workspace", "ws", "--scopes", "read,write")
        assert made.returncode == 0, made.stderr
        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            async with aiohttp.ClientSession() as http:
                batch = [{"event": "seen", "user_id": f"u{i}"} for i in range(events)]
                async with http.post(f"{base}/v1/events/batch", headers=bearer(made.stdout.strip()),
                                     json={"events": batch}) as resp:
                    assert resp.status == 200, await resp.text()
            assert await pending_once_caught_up(base) == 0
        finally:
            await asyncio.to_thread(server_process.stop, proc)

    def refused(done: subprocess.CompletedProcess) -> None:
        assert done.returncode == 4, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert f'mirrors another PostgreSQL database, "{urlparse(first).path[1:]}"' in done.stderr
        assert f'not this one, "{urlparse(second).path[1:]}"' in done.stderr
        assert "Run `tally analytics rebuild` to make it mirror this database" in done.stderr
        assert "TALLY_ANALYTICS_DIR" in done.stderr

    try:
        await serve_and_send(env, 5)
        assert (await asyncio.to_thread(status, env))["analytics_keyed_events"] == 5

        serve = [sys.executable, "-m", "app", "serve", "--port", str(server_process.free_port())]
        refused(await asyncio.to_thread(subprocess.run, serve, capture_output=True, text=True, timeout=120,
                                        env={**os.environ, **moved}))
        refused(await asyncio.to_thread(tally, moved, "analytics", "status"))
        refused(await asyncio.to_thread(tally, moved, "analytics", "rebuild", "--since", "2020-01-01"))

        rebuilt = await asyncio.to_thread(tally, moved, "analytics", "rebuild")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert "rebuilt: 0 events" in rebuilt.stdout
        await serve_and_send(moved, 2)
        counts = await asyncio.to_thread(status, moved)
        assert (counts["postgres_events"], counts["analytics_keyed_events"]) == (2, 2)  # none of the first's

        back = await asyncio.to_thread(tally, env, "analytics", "status")  # the store is the second's now
        assert back.returncode == 4 and "Traceback" not in back.stderr
    finally:
        await drop_database(pg_admin_dsn, first)
        await drop_database(pg_admin_dsn, second)
