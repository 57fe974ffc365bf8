"""An embedded PostgreSQL that shut down (a clean stop, or one that could not write its WAL on a full disk and
shut down after its failed recovery) removes its Unix socket: connecting then fails with FileNotFoundError, not a
refused connection. Requests meanwhile answer 503 with Retry-After as in any outage (they answered 500 with a
traceback each: fault walk-through, embedded PostgreSQL on a full tmpfs), until the server starts it again. A
restart that keeps failing (there, the disk still full) is logged once, not at every attempt."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import aiohttp

from tests import server_process
from tests.conftest import bearer
from tests.embedded_dirs import alive, postmaster_of


async def test_requests_while_the_embedded_postgresql_is_down_answer_503_and_its_restarts_log_once(embedded_dir):
    env = {"TALLY_DATA_DIR": str(embedded_dir / "data"), "DATABASE_URL": "", "REDIS_URL": ""}
    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    pgdata = embedded_dir / "data" / "pgdata"
    conf = pgdata / "postgresql.auto.conf"
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
            original = conf.read_text()
            # Every start fails until this is undone (each attempt of the server's watchdog, every 5 s, writes
            # its FATAL to the server log), so the requests below all meet a server that is down.
            conf.write_text(original + "\nshared_buffers = 'none at all'\n")
            postmaster = postmaster_of(embedded_dir / "data")
            postmaster.send_signal(signal.SIGINT)  # a fast shutdown: it removes its socket
            for _ in range(600):
                if not alive(postmaster):
                    break
                await asyncio.sleep(0.05)
            i = 0
            while (pgdata / "log").read_text(errors="replace").count("invalid value for parameter") < 3:
                i += 1
                statuses.append(await send(i))
                assert i < 2000, "the server did not try to start it again"
                await asyncio.sleep(0.02)
            assert set(statuses) == {503}, statuses

            conf.write_text(original)
            for _ in range(600):
                i += 1
                if await send(i) == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("it did not come back")
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert "unhandled error" not in log and "FileNotFoundError" not in log, log[-3000:]
    assert log.count("could not start again") == 1, log[-4000:]  # its output, once
    assert log.count("Failed to start server") <= 1, log[-4000:]
    assert "timer job failed" not in log, [line for line in log.splitlines() if "timer job failed" in line]
    assert "embedded postgresql had stopped; started it again" in log
