"""The real server process killed with SIGKILL while clients send with Idempotency-Keys: once it is back, a
client retrying every request it sent (answered or cut off) stores each one exactly once."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import asyncpg

from tests import server_process
from tests.conftest import bearer
from tests.test_analytics_durability import drop_database, fresh_database, tally


async def test_retries_after_kill_9_store_every_request_once(pg_admin_dsn, tmp_path):
    dsn = await fresh_database(pg_admin_dsn)
    env = {"DATABASE_URL": dsn, "TALLY_DATA_DIR": str(tmp_path)}
    try:
        made = await asyncio.to_thread(tally, env, "create-key", "--workspace", "retry", "--scopes", "read,write")
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        proc, base = await asyncio.to_thread(server_process.start, env)
        sent: dict[str, tuple[str, bytes]] = {}  # Idempotency-Key -> (path, body)
        answered: dict[str, dict] = {}
        enough = asyncio.Event()

        def request(n: int, i: int) -> tuple[str, str, bytes]:
            tag = f"{n}-{i}"
            if n % 2:  # half the clients send single events, half batches of 10
                return tag, "/v1/events", json.dumps({"event": "paid", "user_id": f"u{n}",
                                                      "properties": {"req": tag}}).encode()
            events = [{"event": "seen", "user_id": f"u{n}", "properties": {"req": tag}} for _ in range(10)]
            return tag, "/v1/events/batch", json.dumps({"events": events}).encode()

        async def post(http: aiohttp.ClientSession, base: str, tag: str, path: str, body: bytes):
            headers = {**bearer(key), "Content-Type": "application/json", "Idempotency-Key": tag}
            async with http.post(f"{base}{path}", data=body, headers=headers) as resp:
                return resp.status, await resp.json(), resp.headers.get("Idempotent-Replayed")

        async with aiohttp.ClientSession() as http:
            async def sender(n: int) -> None:
                for i in range(100_000):
                    tag, path, body = request(n, i)
                    sent[tag] = (path, body)
                    try:
                        status, answer, _ = await post(http, base, tag, path, body)
                    except (aiohttp.ClientError, ValueError):
                        return  # the process is gone
                    assert status == 200, answer
                    answered[tag] = answer
                    if len(answered) >= 400:  # well into ingesting
                        enough.set()

            senders = [asyncio.create_task(sender(n)) for n in range(6)]
            await asyncio.wait_for(enough.wait(), 120)
            proc.kill()
            await asyncio.gather(*senders)
        await asyncio.to_thread(proc.wait, 30)
        assert len(sent) > len(answered)  # requests cut off by the kill: committed or not, the client cannot tell

        proc, base = await asyncio.to_thread(server_process.start, env)
        try:
            async with aiohttp.ClientSession() as http:
                for tag, (path, body) in sent.items():
                    status, answer, replayed = await post(http, base, tag, path, body)
                    assert status == 200, answer
                    if tag in answered:  # answered before the kill: the same answer again
                        assert answer == answered[tag] and replayed == "true", tag
        finally:
            await asyncio.to_thread(server_process.stop, proc)

        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT properties->>'req' AS tag, count(*) AS n, min(id) AS id FROM events "
                                    "GROUP BY 1")
        finally:
            await conn.close()
        stored = {r["tag"]: r for r in rows}
        assert set(stored) == set(sent)
        for tag, (path, _) in sent.items():
            assert stored[tag]["n"] == (1 if path == "/v1/events" else 10), tag
            if path == "/v1/events" and tag in answered:
                assert stored[tag]["id"] == answered[tag]["id"]
    finally:
        await drop_database(pg_admin_dsn, dsn)
