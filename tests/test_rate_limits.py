"""Per-key rolling-window limits: plans, custom enterprise limits, 429, Redis shared across processes."""

import asyncio
import dataclasses
import secrets

import pytest
from redis.asyncio import Redis

from app.plans import limits_for, parse_limit
from app.ratelimit import RedisLimiter
from common.outages import Outages
from storage import workspaces as store
from tests.conftest import bearer, connect


async def _set_plan(database_url: str, workspace: str, plan: str, limits: dict) -> None:
    conn = await connect(database_url)
    try:
        workspace_id = await store.ensure_workspace(conn, workspace)
        await store.set_plan(conn, workspace_id, plan, limits)
    finally:
        await conn.close()


def test_plan_tables():
    assert limits_for("free", "events") == (1000, 50_000)
    assert limits_for("free", "admin") == (10, 300)
    assert limits_for("pro", "query") > limits_for("free", "query")
    assert limits_for("enterprise", "identify", {"identify": [7, 70]}) == (7, 70)
    assert limits_for("pro", "identify", {"identify": [7, 70]}) == limits_for("pro", "identify")
    assert parse_limit("events=5/100") == ("events", (5, 100))
    with pytest.raises(ValueError):
        parse_limit("nope=1/2")


async def _exhaust(client, key, path="/v1/events", n=6):
    return [await client.post(path, headers=bearer(key), json={"event": "e", "user_id": "u"}) for _ in range(n)]


async def test_429_with_retry_after_once_the_allowance_is_spent(client, make_key, workspace, database_url):
    key = await make_key("read,write")
    await _set_plan(database_url, workspace, "enterprise", {"events": [3, 100]})
    responses = await _exhaust(client, key, n=5)
    statuses = [r.status for r in responses]
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429]
    limited = responses[-1]
    assert (await limited.json())["error"]["code"] == "rate_limited"
    assert limited.headers["X-RateLimit-Limit"] == "3"
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    assert int(limited.headers["Retry-After"]) >= 1
    # Another group keeps its own allowance.
    assert (await client.get("/v1/events", headers=bearer(key))).status == 200


async def test_rate_limited_requests_store_nothing(client, make_key, workspace, database_url):
    key = await make_key("read,write")
    await _set_plan(database_url, workspace, "enterprise", {"events": [1, 100]})
    await _exhaust(client, key, n=4)
    body = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert len(body["data"]) == 1


async def test_each_key_has_its_own_allowance(client, make_key, workspace, database_url):
    first, second = await make_key("write"), await make_key("write")
    await _set_plan(database_url, workspace, "enterprise", {"events": [2, 100]})
    assert [r.status for r in await _exhaust(client, first, n=3)] == [200, 200, 429]
    assert [r.status for r in await _exhaust(client, second, n=2)] == [200, 200]


async def test_requests_without_a_key_are_limited_per_ip(client):
    statuses = [(await client.get("/v1/events")).status for _ in range(60)]
    assert statuses[0] == 401 and 429 in statuses


async def test_redis_limits_are_shared_between_processes(make_client, settings, redis_url, make_key, workspace,
                                                         database_url):
    shared = dataclasses.replace(settings, redis_url=redis_url)
    one, two = await make_client(shared), await make_client(shared)
    key = await make_key("write")
    await _set_plan(database_url, workspace, "enterprise", {"events": [4, 100]})
    statuses = []
    for i in range(6):
        target = one if i % 2 else two
        statuses.append((await target.post("/v1/events", headers=bearer(key),
                                           json={"event": "e", "user_id": "u"})).status)
    assert statuses.count(200) == 4 and statuses[-2:] == [429, 429]


async def test_redis_limiter_answers_one_turns_hits_with_one_script_call_in_order(redis_url):
    redis = Redis.from_url(redis_url)
    limiter = RedisLimiter(redis, Outages())
    calls, script = [], limiter._script

    async def counted(**kwargs):
        calls.append(kwargs)
        return await script(**kwargs)

    limiter._script = counted
    bucket = f"test:{secrets.token_hex(4)}"
    try:
        verdicts = await asyncio.gather(*[limiter.hit(bucket, (3, 100)) for _ in range(5)])
        assert [v.allowed for v in verdicts] == [True, True, True, False, False]
        assert [v.remaining for v in verdicts] == [2, 1, 0, 0, 0]
        assert len(calls) == 1
        assert (await limiter.hit(bucket, (3, 100))).allowed is False  # the next turn sees them all
    finally:
        await redis.aclose()


async def test_redis_limiter_falls_back_to_memory_for_every_waiting_hit_when_redis_is_down():
    redis = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=1)
    outages = Outages()
    fallbacks = outages.metrics.dependency_fallbacks.labels("rate_limits")
    limiter = RedisLimiter(redis, outages)
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*[limiter.hit("b", (2, 100)) for _ in range(3)], return_exceptions=True), 10)
        # Counted in this process instead: the limit still binds, and every hit was a counted fallback.
        assert [r.allowed for r in results] == [True, True, False]
        assert fallbacks._value.get() == 3
        assert outages.metrics.dependency_outages.labels("redis")._value.get() == 1  # one outage, not three
    finally:
        await redis.aclose()


@pytest.mark.parametrize(("failure", "status", "code"), [
    (RuntimeError("a bug"), 500, "internal_error"),
    (ConnectionResetError("the database went away"), 503, "unavailable"),
])
async def test_a_keyed_request_that_fails_unexpectedly_still_carries_the_rate_limit_headers(
        client, make_key, monkeypatch, failure, status, code):
    """Spec §8: every response, successful or not, carries X-RateLimit-*; a 500 or 503 rendered by the
    root layer too."""
    from storage import users

    async def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(users, "get_profile", fail)
    resp = await client.get("/v1/users/u1", headers=bearer(await make_key("read")))
    assert resp.status == status
    assert (await resp.json())["error"]["code"] == code
    assert all(h in resp.headers for h in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"))


@pytest.mark.parametrize("stored", [2**53 + 1, 2**64 - 1, 10**30])
async def test_a_limit_stored_past_the_bound_keeps_the_headers_consistent(client, make_key, workspace, database_url,
                                                                          stored):
    """Limits set before `tally set-plan` bounded them (at 10^9) are read as the bound: past 2^53 the limiter's
    double arithmetic made X-RateLimit-Remaining exceed X-RateLimit-Limit."""
    key = await make_key("read,write")
    await _set_plan(database_url, workspace, "enterprise", {"events": [stored, stored]})
    resp = await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "u"})
    assert resp.status == 200
    limit, remaining = int(resp.headers["X-RateLimit-Limit"]), int(resp.headers["X-RateLimit-Remaining"])
    assert (limit, remaining) == (10**9, 10**9 - 1)


@pytest.mark.parametrize("stored", [[0, 0], [0, 500], [-1, 10]])
async def test_a_limit_of_zero_stored_before_set_plan_refused_it_gives_the_plans_allowance(
        client, make_key, workspace, database_url, stored):
    """`set-plan --limit events=0/0` was accepted once and refused every request of the workspace until set-plan
    was run again; such a stored pair now counts as no custom limit (enterprise's own allowance)."""
    key = await make_key("read,write")
    await _set_plan(database_url, workspace, "enterprise", {"events": stored})
    resp = await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "u"})
    assert resp.status == 200
    assert int(resp.headers["X-RateLimit-Limit"]) == limits_for("enterprise", "events")[0] == 10_000
