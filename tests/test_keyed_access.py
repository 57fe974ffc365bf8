"""Keys, scopes, expiry, revocation, error shapes and rate-limit headers on the keyed API."""

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from storage import workspaces as store
from tests.conftest import bearer

ENDPOINTS = [
    ("post", "/v1/events", {"event": "e", "user_id": "u"}, "write"),
    ("post", "/v1/events/batch", {"events": [{"event": "e", "user_id": "u"}]}, "write"),
    ("get", "/v1/events", None, "read"),
    ("post", "/v1/identify", {"user_id": "u", "traits": {"a": 1}}, "write"),
    ("get", "/v1/users", None, "read"),
    ("get", "/v1/users/u", None, "read"),
    ("delete", "/v1/users/u", None, "admin"),
]


@pytest.mark.parametrize("scopes", ["read", "write", "admin", "read,write", "read,write,admin"])
async def test_scope_matrix(client, make_key, scopes):
    key = await make_key(scopes)
    held = set(scopes.split(","))
    for method, path, body, needed in ENDPOINTS:
        resp = await getattr(client, method)(path, headers=bearer(key), json=body)
        if needed in held:
            assert resp.status in (200, 204, 404), (method, path, resp.status)
        else:
            assert resp.status == 403, (method, path, scopes)
            error = (await resp.json())["error"]
            assert error["code"] == "forbidden" and needed in error["message"]
        assert resp.headers["X-RateLimit-Limit"].isdigit()


@pytest.mark.parametrize("header", [None, "Bearer", "Basic abc", "Bearer tally_live_sk_wrongwrongwrongwrongwrong",
                                    "Bearer not-even-a-key"])
async def test_missing_or_invalid_key_is_401(client, header):
    headers = {"Authorization": header} if header else {}
    resp = await client.get("/v1/events", headers=headers)
    assert resp.status == 401
    assert (await resp.json())["error"]["code"] == "unauthorized"
    assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} <= set(resp.headers)


async def test_expired_key_is_401(client, make_key):
    key = await make_key("read", expires_at=datetime.now(UTC) - timedelta(minutes=1))
    resp = await client.get("/v1/events", headers=bearer(key))
    assert resp.status == 401


async def test_revocation_reaches_every_process_within_the_cache_ttl(make_client, settings, make_key, database_url):
    fast = dataclasses.replace(settings, key_cache_seconds=0.3)
    one, two = await make_client(fast), await make_client(fast)
    key = await make_key("read")
    assert (await one.get("/v1/events", headers=bearer(key))).status == 200
    assert (await two.get("/v1/events", headers=bearer(key))).status == 200
    conn = await asyncpg.connect(database_url)
    try:
        key_id = await conn.fetchval("SELECT id FROM api_keys WHERE key_hash = sha256($1::text::bytea)", key)
        assert await store.revoke_key(conn, key_id)
    finally:
        await conn.close()
    await asyncio.sleep(0.4)
    assert (await one.get("/v1/events", headers=bearer(key))).status == 401
    assert (await two.get("/v1/events", headers=bearer(key))).status == 401


async def test_unknown_route_and_wrong_method_are_json(client, make_key):
    key = await make_key("read")
    resp = await client.get("/v1/nothing-here", headers=bearer(key))
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "not_found"
    assert "X-RateLimit-Remaining" in resp.headers
    resp = await client.put("/v1/events", headers=bearer(key))
    assert resp.status == 405
    assert (await resp.json())["error"]["code"] == "method_not_allowed"
    resp = await client.get("/nowhere")
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


async def test_rate_limit_headers_count_down(client, make_key):
    key = await make_key("read")
    # The per-second window may turn between the two requests on a slow machine (both then say 99 left): the
    # pair is sent again until both fall in one window, as their resets tell.
    for _ in range(5):
        before = datetime.now(UTC).timestamp()
        first = await client.get("/v1/events", headers=bearer(key))
        second = await client.get("/v1/events", headers=bearer(key))
        if first.headers["X-RateLimit-Reset"] == second.headers["X-RateLimit-Reset"]:
            break
    assert int(first.headers["X-RateLimit-Limit"]) == 100  # free plan query group, per second
    assert int(second.headers["X-RateLimit-Remaining"]) < int(first.headers["X-RateLimit-Remaining"])
    reset = int(first.headers["X-RateLimit-Reset"])
    assert before <= reset <= before + 61  # the end of the first request's window: after it, within a minute
