"""An embedded PostgreSQL that shut down (a clean stop, or one that could not write its WAL on a full disk and
shut down after its failed recovery) removes its Unix socket: connecting then fails with FileNotFoundError, not a
refused connection. Requests meanwhile answer 503 with Retry-After as in any outage (they answered 500 with a
traceback each: fault walk-through, embedded PostgreSQL on a full tmpfs), until the server starts it again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import aiohttp
import psutil

from tests import server_process
from tests.conftest import bearer
from tests.embedded_dirs import alive, postmaster_of


async def test_requests_while_the_embedded_postgresql_is_stopped_answer_503_until_it_is_back(embedded_dir):
    env = {"TALLY_DATA_DIR": str(embedded_dir / "data"), "DATABASE_URL": "", "REDIS_URL": ""}
    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    try:
        key = (await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "app", "create-key", "--workspace", "w", "--scopes", "read,write"],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=True)).stdout.strip()
        statuses: list[int] = []
        async with aiohttp.ClientSession() as http:
            async def send(i: int) -> int:
                async with http.post(f"{base}/v1/events", headers=bearer(key),
                                     json={"event": "e", "user_id": f"u{i}"}) as resp:
                    if resp.status == 503:
                        assert resp.headers["Retry-After"] == "5"
                    return resp.status

            assert await send(0) == 200
            postmaster = postmaster_of(embedded_dir / "data")
            postmaster.send_signal(signal.SIGINT)  # a fast shutdown: it removes its socket
            await asyncio.to_thread(psutil.wait_procs, [postmaster], 30)
            for i in range(1, 600):
                statuses.append(await send(i))
                again = postmaster_of(embedded_dir / "data")
                if statuses[-1] == 200 and again is not None and alive(again):
                    break
                await asyncio.sleep(0.02)
        assert 500 not in statuses, statuses
        assert 503 in statuses and statuses[-1] == 200, statuses
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert "embedded postgresql had stopped; started it again" in log
    assert "unhandled error" not in log and "FileNotFoundError" not in log, log[-3000:]


async def test_an_embedded_postgresql_that_cannot_start_again_is_logged_once_not_every_attempt(embedded_dir):
    """Its restart fails until the cause is gone (in the walk-through, a disk still full): each attempt every
    5 s logged its pg_ctl output, the whole server log and a traceback, about 25 KB, growing with the server's
    log. The first failure says why, later ones say nothing until it starts again."""
    env = {"TALLY_DATA_DIR": str(embedded_dir / "data"), "DATABASE_URL": "", "REDIS_URL": ""}
    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    pgdata = embedded_dir / "data" / "pgdata"
    conf = pgdata / "postgresql.auto.conf"
    try:
        postmaster = postmaster_of(embedded_dir / "data")
        original = conf.read_text()
        conf.write_text(original + "\nshared_buffers = 'none at all'\n")  # every start now fails
        postmaster.send_signal(signal.SIGINT)
        await asyncio.to_thread(psutil.wait_procs, [postmaster], 30)
        for _ in range(600):  # three attempts of the server's watchdog, each writing its FATAL to the server log
            if (pgdata / "log").read_text(errors="replace").count("invalid value for parameter") >= 3:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the server did not try to start it again")
        conf.write_text(original)
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                async with http.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("it did not come back")
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert log.count("could not start again") == 1, log[-4000:]
    assert log.count("Failed to start server") <= 1, log[-4000:]
    assert "timer job failed" not in log, [line for line in log.splitlines() if "timer job failed" in line]
    assert "embedded postgresql had stopped; started it again" in log
