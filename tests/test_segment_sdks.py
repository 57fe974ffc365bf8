"""Segment's own SDKs, unchanged, deliver to a running Tally: segment-analytics-python and
@segment/analytics-node, each with `host` set to the server.

Between the SDK and the server sits a small proxy that delivers the SDK's first batch twice at once (a retry
racing the first delivery) and then answers 503, so the SDK retries the whole batch a third time. Events,
profiles and the absence of duplicates are then read back through GET /v1/events and GET /v1/users.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests import server_process
from tests.conftest import bearer

NODE_DIR = Path(__file__).with_name("segment_node")


class RetryingProxy:
    """Forwards to Tally; the first /v1/batch of each write key goes twice, concurrently, and gets a 503."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: set[str] = set()
        self.deliveries: list[tuple[str, int]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        # request.read() has already undone any Content-Encoding, so it is not forwarded.
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        async with aiohttp.ClientSession() as http:
            async def forward() -> tuple[int, bytes]:
                async with http.post(self.upstream + request.path, data=body, headers=headers) as resp:
                    return resp.status, await resp.read()

            auth = request.headers.get("Authorization", "")
            if request.path == "/v1/batch" and auth not in self.seen:
                self.seen.add(auth)
                answers = await asyncio.gather(forward(), forward())
                self.deliveries += [(auth, status) for status, _ in answers]
                return web.json_response({"code": "unavailable", "message": "try again"}, status=503)
            status, answer = await forward()
            self.deliveries.append((auth, status))
            return web.Response(status=status, body=answer, content_type="application/json")


@pytest.fixture
async def tally(database_url, client):
    """A real server process on the test database (the client fixture has migrated it)."""
    proc, base = await asyncio.to_thread(server_process.start, {"DATABASE_URL": database_url})
    try:
        yield base
    finally:
        await asyncio.to_thread(server_process.stop, proc)


@pytest.fixture
async def proxy(tally, aiohttp_server):
    retrying = RetryingProxy(tally)
    app = web.Application()
    app.router.add_post("/{tail:.*}", retrying.handle)
    server = await aiohttp_server(app)
    retrying.url = str(server.make_url("")).rstrip("/")  # type: ignore[attr-defined]
    return retrying


async def segment_source(base: str, key: str) -> tuple[str, str]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/data-sources", headers=bearer(key),
                             json={"name": "sdk", "type": "segment", "credentials": {}}) as resp:
            assert resp.status == 201, await resp.text()
            body = await resp.json()
    return body["id"], body["write_key"]


async def read_back(base: str, key: str, prefix: str) -> tuple[list[dict], dict, int]:
    async with aiohttp.ClientSession(headers=bearer(key)) as http:
        async with http.get(f"{base}/v1/events", params={"limit": "1000"}) as resp:
            events = [e for e in (await resp.json())["data"] if (e["user_id"] or "").startswith(prefix)
                      or (e["anonymous_id"] or "").startswith(prefix)]
        async with http.get(f"{base}/v1/users/{prefix}-user") as resp:
            profile = await resp.json()
        async with http.get(f"{base}/v1/users/{prefix}-anon") as resp:
            anon_status = resp.status
    return events, profile, anon_status


async def assert_delivered(base: str, key: str, proxy: RetryingProxy, source_id: str, prefix: str) -> None:
    events, profile, anon_status = await read_back(base, key, prefix)
    rows = sorted((e["event"], e["user_id"], e["anonymous_id"], e["properties"]) for e in events)
    assert rows == [
        ("order_completed", f"{prefix}-user", None, {"total": 42.5, "currency": "EUR"}),
        ("page_viewed", f"{prefix}-user", None, {"path": "/pricing", "name": "Pricing", "category": "Docs"}),
        # The anonymous event was claimed by alias(previousId=anon, userId=user).
        ("product_viewed", f"{prefix}-user", f"{prefix}-anon", {"sku": "A1"}),
    ], rows
    assert profile["traits"] == {"email": f"{prefix}@example.com", "plan": "pro",
                                 "group": {"id": "acme", "name": "Acme Inc", "seats": 12}}
    assert profile["event_count"] == 3
    assert anon_status == 404  # nothing was identified under the anonymous id
    # The batch reached Tally at least three times (two racing, then the SDK's retry), each answered 200.
    statuses = [status for _, status in proxy.deliveries]
    assert len(statuses) >= 3 and set(statuses) == {200}, statuses
    async with aiohttp.ClientSession(headers=bearer(key)) as http:
        async with http.get(f"{base}/v1/data-sources/{source_id}") as resp:
            source = await resp.json()
    assert source["status"] == "active" and source["last_synced_at"] is not None


async def test_segment_analytics_python_delivers_unchanged(tally, proxy, make_key):
    from segment.analytics import Client

    key = await make_key()
    source_id, write_key = await segment_source(tally, key)
    errors: list = []

    def send() -> None:
        # upload_interval: how long the consumer waits to fill a batch; every call fits one batch anyway.
        sdk = Client(write_key, host=proxy.url, on_error=lambda exc, batch: errors.append(exc), max_retries=5,
                     upload_interval=2)
        sdk.track(anonymous_id="py-anon", event="Product Viewed", properties={"sku": "A1"})
        sdk.identify("py-user", {"email": "py@example.com", "plan": "pro"})
        sdk.track("py-user", "Order Completed", {"total": 42.5, "currency": "EUR"})
        sdk.page("py-user", "Docs", "Pricing", {"path": "/pricing"})
        sdk.group("py-user", "acme", {"name": "Acme Inc", "seats": 12})
        sdk.alias("py-anon", "py-user")
        sdk.flush()
        sdk.shutdown()

    await asyncio.to_thread(send)
    assert errors == []
    await assert_delivered(tally, key, proxy, source_id, "py")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_segment_analytics_node_delivers_unchanged(tally, proxy, make_key):
    if not (NODE_DIR / "node_modules" / "@segment" / "analytics-node").exists():
        npm = shutil.which("npm")
        assert npm, "node is installed but npm is not"
        done = await asyncio.to_thread(subprocess.run, [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund"],
                                       cwd=NODE_DIR, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    key = await make_key()
    source_id, write_key = await segment_source(tally, key)
    done = await asyncio.to_thread(subprocess.run, [shutil.which("node"), "send.mjs", proxy.url, write_key, "node"],
                                   cwd=NODE_DIR, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    await assert_delivered(tally, key, proxy, source_id, "node")
