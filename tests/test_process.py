"""The real server process: SIGTERM drains acknowledged work; the embedded default starts from nothing and
starts its PostgreSQL again when it dies."""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import aiohttp
import psutil

from tests import server_process
from tests.conftest import bearer, connect


async def test_sigterm_flushes_everything_acknowledged(database_url, make_key, workspace):
    key = await make_key("write")
    proc, base = await asyncio.to_thread(server_process.start, {"DATABASE_URL": database_url})
    acked: list[str] = []
    async with aiohttp.ClientSession() as http:

        enough = asyncio.Event()

        async def send(i: int) -> None:
            try:
                async with http.post(f"{base}/v1/events", headers=bearer(key),
                                     json={"event": "load", "user_id": f"u{i % 7}"}) as resp:
                    if resp.status == 200:
                        acked.append((await resp.json())["id"])
                        if len(acked) >= 20:
                            enough.set()
            except aiohttp.ClientError:
                pass  # refused after shutdown began: not acknowledged, so nothing is owed

        tasks = [asyncio.create_task(send(i)) for i in range(400)]
        await asyncio.wait_for(enough.wait(), 30)
        proc.send_signal(signal.SIGTERM)  # with many requests still in flight
        await asyncio.gather(*tasks)
    await asyncio.to_thread(proc.wait, 60)
    shutil.rmtree(proc.own_dir, ignore_errors=True)  # stop() is not called: its data folder was left in /tmp
    assert proc.returncode == 0, server_process.output(proc)[-2000:]
    conn = await connect(database_url)
    try:
        stored = {r["id"] for r in await conn.fetch(
            "SELECT e.id FROM events e JOIN workspaces w ON w.id = e.workspace_id WHERE w.name = $1", workspace)}
    finally:
        await conn.close()
    assert len(acked) > 20, "requests in flight at the signal should still have been acknowledged"
    assert set(acked) <= stored


async def test_embedded_default_starts_from_an_empty_folder_keeps_data_and_outlives_its_postgresql(embedded_dir):
    tmp_path = embedded_dir  # the server's own user must reach it throughout (tests/embedded_dirs.py)
    env = {"TALLY_DATA_DIR": str(tmp_path / "data"), "DATABASE_URL": "", "REDIS_URL": ""}
    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    try:
        key = (await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "app", "create-key", "--workspace", "local", "--scopes", "read,write"],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=True,
        )).stdout.strip()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/v1/events", headers=bearer(key), json={"event": "hi", "user_id": "me"}) as r:
                assert r.status == 200
    finally:
        await asyncio.to_thread(server_process.stop, proc)
    assert (tmp_path / "data" / "pgdata" / "PG_VERSION").read_text().strip() == "18"
    assert (tmp_path / "data" / "secret").exists()

    proc, base = await asyncio.to_thread(server_process.start, env, 120)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/v1/events", headers=bearer(key)) as r:
                body = await r.json()
            assert [e["event"] for e in body["data"]] == ["hi"]

            # The embedded PostgreSQL dies (an OOM kill): the server starts it again, and then requests answer
            # as before. Meanwhile they answer 503, or 200 on a backend that has not noticed yet; never 500 (a
            # flush whose connection broke mid-COPY is an outage too: actors/base.py).
            pid_file = tmp_path / "data" / "pgdata" / "postmaster.pid"
            postmaster = int(pid_file.read_text().split()[0])
            os.kill(postmaster, signal.SIGKILL)

            def started_again() -> bool:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    pid = int(pid_file.read_text().split()[0])
                    return pid != postmaster and psutil.pid_exists(pid)
                return False

            async def answer(method: str, **kwargs) -> tuple[int, dict | None]:
                async with http.request(method, f"{base}/v1/events", headers=bearer(key), **kwargs) as r:
                    assert r.status in (200, 503), (r.status, [line for line in server_process.output(proc)
                                                               .splitlines() if '"status":200' not in line][-20:])
                    return r.status, (await r.json() if r.status == 200 else None)

            for _ in range(600):
                status, _ = await answer("POST", json={"event": "again", "user_id": "me"})
                if status == 200 and started_again():
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the embedded PostgreSQL was not started again: "
                                     + "\n".join(server_process.output(proc).splitlines()[-40:]))
            for _ in range(600):
                status, listed = await answer("GET")
                if status == 200:
                    break
                await asyncio.sleep(0.1)
            assert [e["event"] for e in listed["data"]][-1] == "hi" and {e["event"] for e in listed["data"]} == {
                "hi", "again"}
    finally:
        log = await asyncio.to_thread(server_process.stop, proc)
    assert "embedded postgresql had stopped; started it again" in log


async def test_serve_logs_where_it_listens_once_ready(database_url):
    proc, base = await asyncio.to_thread(server_process.start, {"DATABASE_URL": database_url})
    try:
        lines = [json.loads(line) for line in server_process.output(proc).splitlines() if line.startswith("{")]
    finally:
        await asyncio.to_thread(server_process.stop, proc)
    ready = [line for line in lines if line["logger"] == "tally.serve"]
    assert [line["msg"] for line in ready] == [f"tally serve ready: listening on {base}"]
    after = lines[lines.index(ready[0]) + 1:]  # start-up was over: only requests (the readiness probes) follow
    assert all(line["msg"] == "request" for line in after), after


async def test_a_taken_port_is_one_clear_line(database_url, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env={**os.environ, "DATABASE_URL": database_url, "TALLY_DATA_DIR": str(tmp_path)}, capture_output=True,
            text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (f"start-up error: cannot listen on 127.0.0.1:{port} (HOST, PORT): "
                                            "Address already in use")
