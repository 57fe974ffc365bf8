"""Disks filling up (fault walk-through, docs/benchmarks.md "Faults under load"). The analytics store that can
take no insert (its disk full: ClickHouse refuses with NOT_ENOUGH_SPACE) leaves ingestion alone, and an analytics
read, which first brings the store up to date, answers 503 with Retry-After, as behind a backlog, not a 500 with
a traceback per read; once the store takes inserts again the read counts every event. PostgreSQL's own disk
full (an embedded one on a small tmpfs) is an outage: 503 with Retry-After, nothing acknowledged lost."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import asyncpg
import psutil
import pytest

from app.appkeys import MIRROR
from app.outages import MIRROR_BEHIND
from storage.clickhouse import AnalyticsStore
from tests import server_process
from tests.conftest import bearer
from tests.embedded_dirs import alive, postmaster_of
from tests.reports_support import create_report, run_report

NO_ROOM = 1 << 62  # bytes a MergeTree table must find free before it takes an insert: none can


@contextmanager
def store_full(store: AnalyticsStore):
    """The store's keyed table refuses every insert as a full disk does (NOT_ENOUGH_SPACE), until the block ends."""
    table = f"{store.database}.keyed_events"
    store.client.command(f"ALTER TABLE {table} MODIFY SETTING min_free_disk_bytes_to_perform_insert = {NO_ROOM}")
    try:
        yield
    finally:
        store.client.command(f"ALTER TABLE {table} RESET SETTING min_free_disk_bytes_to_perform_insert")


async def test_reads_while_the_analytics_store_cannot_insert_answer_503_then_count_everything(
        make_client, settings, make_key, analytics_store):
    client = await make_client(settings)
    key = await make_key("read,write")
    day = {"from": "2024-04-01T00:00:00Z", "to": "2024-04-02T00:00:00Z"}
    report = await create_report(client, key, {"name": "s", "type": "event_volume",
                                               "config": {"events": ["signup"], **day}})
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "signup"}]})).json()
    chart = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data?from={day['from']}&to={day['to']}"
    event = {"event": "signup", "user_id": "u1", "timestamp": "2024-04-01T10:00:00Z"}
    assert (await client.post("/v1/events", headers=bearer(key), json=event)).status == 200
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 1

    with store_full(analytics_store):
        event["user_id"] = "u2"
        resp = await client.post("/v1/events", headers=bearer(key), json=event)
        assert resp.status == 200  # PostgreSQL is the system of record: ingestion does not need the store
        for url in (f"/v1/reports/{report['id']}/run", chart):
            resp = await asyncio.wait_for(client.get(url, headers=bearer(key)), 20)
            assert resp.status == 503, (url, resp.status, await resp.text())
            assert resp.headers["Retry-After"] == "10"
            assert await resp.json() == {"error": {"code": "unavailable", "message": MIRROR_BEHIND}}

    await client.app[MIRROR].catch_up()
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 2
    resp = await client.get(chart, headers=bearer(key))
    assert resp.status == 200, await resp.text()


def fill(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, size)


@pytest.fixture
def small_disk(embedded_dir) -> Iterator[Path]:
    """A 160 MB tmpfs for an embedded PostgreSQL's data folder (skipped where mounting is not permitted)."""
    path = embedded_dir / "data"
    path.mkdir(mode=0o755)
    mount = shutil.which("mount")
    if mount is None or subprocess.run([mount, "-t", "tmpfs", "-o", "size=160m,mode=755", "tmpfs", str(path)],
                                       capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield path
    finally:
        postmaster = postmaster_of(path.parent)
        if postmaster is not None and alive(postmaster):
            postmaster.send_signal(signal.SIGINT)
            psutil.wait_procs([postmaster], timeout=30)
        subprocess.run(["umount", str(path)], check=True)


async def test_ingestion_on_a_full_embedded_postgresql_answers_503_and_keeps_what_it_acknowledged(small_disk,
                                                                                                 tmp_path):
    """The embedded PostgreSQL's disk fills under load: its tables cannot grow (53100 disk_full; soon after, in
    the walk-through, its WAL could not be written either, and it stopped: tests/test_embedded_stopped.py).
    Ingestion answers 503 with Retry-After (a full disk answered 500 store_failed per batch, logged each time),
    answers 200 again once space is freed, and every acknowledged event is stored. /readyz says so meanwhile: 503
    from the first refused flush (it answered 200, PostgreSQL answering its SELECT 1), 200 after a commit."""
    env = {"TALLY_DATA_DIR": str(small_disk), "TALLY_ANALYTICS_DIR": str(tmp_path / "analytics"),
           "DATABASE_URL": "", "REDIS_URL": "", "TMPDIR": str(tmp_path)}
    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    ballast = small_disk / "ballast"
    try:
        key = (await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "app", "create-key", "--workspace", "w", "--scopes", "read,write"],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=True)).stdout.strip()
        await asyncio.to_thread(fill, ballast, shutil.disk_usage(small_disk).free - 2 * 1024 * 1024)
        acked, statuses = 0, []
        padding = "x" * 2000
        async with aiohttp.ClientSession() as http:
            async def send(n: int) -> int:
                nonlocal acked
                events = [{"event": "e", "user_id": f"u{n}-{i}", "properties": {"pad": padding}} for i in range(20)]
                async with http.post(f"{base}/v1/events/batch", headers=bearer(key), json={"events": events}) as r:
                    if r.status == 200:
                        acked += 20
                    elif r.status == 503:
                        assert r.headers["Retry-After"] == "5"
                    return r.status

            async def readiness() -> tuple[int, str | None, dict]:
                async with http.get(f"{base}/readyz") as r:
                    return r.status, r.headers.get("Retry-After"), await r.json()

            n, unready = 0, None
            while len(statuses) - statuses.count(200) < 50:  # well into the outage (2 MB of events take it there)
                n += 1
                statuses.append(await send(n))
                if statuses[-1] == 503 and unready is None:  # the first refusal: a flush met the full disk
                    unready = await readiness()
                assert n < 5000, "the disk never filled"
            assert unready == (503, "5", {"status": "unavailable", "database": "DiskFullError"})
            assert set(statuses) == {200, 503}, [s for s in statuses if s not in (200, 503)][:5]

            ballast.unlink()
            for _ in range(600):  # had it stopped, the server starts its PostgreSQL again within seconds
                n += 1
                if await send(n) == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("ingestion did not come back: " + server_process.output(proc)[-3000:])
            ready = await readiness()
            assert ready[0] == 200 and ready[2]["status"] == "ok", ready
        conn = await asyncpg.connect(host=str(small_disk / "pgdata"), user="postgres", database="postgres")
        try:
            assert await conn.fetchval("SELECT count(*) FROM events") >= acked  # none acknowledged is lost
        finally:
            await conn.close()
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert "unhandled error" not in log and "flush failed" not in log, log[-3000:]
