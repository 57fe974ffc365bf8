"""Idempotency-Key on POST /v1/events and /v1/events/batch: a retry stores nothing twice and is answered as the
first request was; another request under the same key is a 409."""

import asyncio
import hashlib
import json

import asyncpg
import pytest

from storage import idempotency as store
from tests.conftest import bearer, connect
from tests.reports_support import workspace_id

EVENT = json.dumps({"event": "paid", "user_id": "u1", "properties": {"amount": 5}}).encode()
BATCH = json.dumps({"events": [{"event": "seen", "user_id": "u1"}, {"event": "Bad Name", "user_id": "u1"},
                               {"event": "seen", "anonymous_id": "a1"}]}).encode()


def _headers(key: str, idempotency_key: str | None = None) -> dict[str, str]:
    headers = {**bearer(key), "Content-Type": "application/json"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


async def _post(client, key, body=EVENT, idempotency_key=None, path="/v1/events"):
    return await client.post(path, data=body, headers=_headers(key, idempotency_key))


async def _stored(database_url, workspace, env="live") -> list[dict]:
    ws = await workspace_id(database_url, workspace)
    conn = await connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, name, received_at FROM events WHERE workspace_id = $1 AND env = $2 "
                                "ORDER BY id", ws, env)
    finally:
        await conn.close()
    return [dict(r) for r in rows]


async def _profile_count(client, key, user_id="u1") -> int:
    resp = await client.get(f"/v1/users/{user_id}", headers=bearer(key))
    return (await resp.json())["event_count"]


async def test_a_retried_event_is_stored_once_and_answered_the_same(client, make_key, database_url, workspace):
    key = await make_key()
    first = await _post(client, key, idempotency_key="order-17")
    again = await _post(client, key, idempotency_key="order-17")
    assert first.status == again.status == 200
    body = await first.json()
    assert await again.json() == body  # the same id and received_at
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    assert [r["id"] for r in await _stored(database_url, workspace)] == [body["id"]]
    assert await _profile_count(client, key) == 1
    # A rotated key of the same workspace and environment is the same client retrying.
    other = await _post(client, await make_key("write"), idempotency_key="order-17")
    assert other.status == 200 and await other.json() == body
    assert len(await _stored(database_url, workspace)) == 1
    # A new key is a new request.
    fresh = await _post(client, key, idempotency_key="order-18")
    assert fresh.status == 200 and (await fresh.json())["id"] != body["id"]
    assert len(await _stored(database_url, workspace)) == 2


async def test_a_retried_batch_stores_each_item_once_and_repeats_its_counts(client, make_key, database_url,
                                                                          workspace):
    key = await make_key()
    first = await _post(client, key, BATCH, "batch-1", "/v1/events/batch")
    body = await first.json()
    assert first.status == 200 and body["received"] == 2 and body["failed"] == 1
    assert [e["index"] for e in body["errors"]] == [1]
    for _ in range(2):
        again = await _post(client, key, BATCH, "batch-1", "/v1/events/batch")
        assert again.status == 200 and await again.json() == body
        assert again.headers["Idempotent-Replayed"] == "true"
    assert [r["name"] for r in await _stored(database_url, workspace)] == ["seen", "seen"]
    assert await _profile_count(client, key) == 1


async def test_a_batch_of_only_failed_items_keeps_its_key(client, make_key, database_url, workspace):
    """Its answer is a 200 like any other: a retry gets it again, a corrected body under the key is a 409."""
    key = await make_key()
    bad = json.dumps({"events": [{"event": "Bad Name", "user_id": "u1"}]}).encode()
    first = await _post(client, key, bad, "all-bad", "/v1/events/batch")
    assert first.status == 200 and (await first.json())["received"] == 0
    again = await _post(client, key, bad, "all-bad", "/v1/events/batch")
    assert again.status == 200 and await again.json() == await first.json()
    fixed = await _post(client, key, BATCH, "all-bad", "/v1/events/batch")
    assert fixed.status == 409
    assert await _stored(database_url, workspace) == []


async def test_another_request_under_a_used_key_is_409_and_stores_nothing(client, make_key, database_url,
                                                                           workspace):
    key = await make_key()
    first = await _post(client, key, idempotency_key="k-1")
    assert first.status == 200
    other = json.dumps({"event": "paid", "user_id": "u1", "properties": {"amount": 6}}).encode()
    for path, body in (("/v1/events", other), ("/v1/events/batch", BATCH)):
        resp = await _post(client, key, body, "k-1", path)
        assert resp.status == 409, path
        error = (await resp.json())["error"]
        assert error["code"] == "idempotency_conflict" and "Idempotency-Key" in error["message"]
        assert "X-RateLimit-Limit" in resp.headers
    stored = await _stored(database_url, workspace)
    assert [r["id"] for r in stored] == [(await first.json())["id"]]
    # The key still answers its own request.
    assert await (await _post(client, key, idempotency_key="k-1")).json() == await first.json()
    # A body both endpoints take (each ignores the other's field) is two requests, one per endpoint.
    both = json.dumps({"event": "paid", "user_id": "u1", "events": []}).encode()
    assert (await _post(client, key, both, path="/v1/events/batch")).status == 200
    assert (await _post(client, key, both, "k-2")).status == 200
    resp = await _post(client, key, both, "k-2", "/v1/events/batch")
    assert resp.status == 409
    assert len(await _stored(database_url, workspace)) == 2


async def test_live_and_test_keys_do_not_share_idempotency_keys(client, make_key, database_url, workspace):
    live, test = await make_key(), await make_key(test=True)
    a = await _post(client, live, idempotency_key="shared")
    b = await _post(client, test, idempotency_key="shared")
    assert a.status == b.status == 200
    assert (await a.json())["id"] != (await b.json())["id"] and "Idempotent-Replayed" not in b.headers
    assert len(await _stored(database_url, workspace, "live")) == 1
    assert len(await _stored(database_url, workspace, "test")) == 1
    # Each environment answers its own retries.
    for key, first in ((live, a), (test, b)):
        retry = await _post(client, key, idempotency_key="shared")
        assert retry.headers["Idempotent-Replayed"] == "true" and await retry.json() == await first.json()
    # Nor do two workspaces.
    elsewhere = await make_key(workspace_name=f"{workspace}-other")
    c = await _post(client, elsewhere, idempotency_key="shared")
    assert c.status == 200 and (await c.json())["id"] not in ((await a.json())["id"], (await b.json())["id"])


async def test_concurrent_requests_with_one_key_store_one_event(client, make_key, database_url, workspace):
    """Racing copies of one request, beside identify calls (the flush's transaction path): one is stored, every
    copy gets its answer."""
    key = await make_key()
    identify = [client.post("/v1/identify", headers=bearer(key), json={"user_id": f"v{i}", "traits": {"i": i}})
                for i in range(10)]
    copies = [_post(client, key, idempotency_key="race") for _ in range(20)]
    batches = [_post(client, key, BATCH, "race-batch", "/v1/events/batch") for _ in range(20)]
    responses = await asyncio.gather(*identify, *copies, *batches)
    assert [r.status for r in responses] == [200] * 50
    singles = [await r.json() for r in responses[10:30]]
    assert all(s == singles[0] for s in singles)
    batched = [await r.json() for r in responses[30:]]
    assert all(b == batched[0] for b in batched) and batched[0]["received"] == 2
    stored = await _stored(database_url, workspace)
    assert sorted(r["name"] for r in stored) == ["paid", "seen", "seen"]
    assert singles[0]["id"] in {r["id"] for r in stored}
    assert await _profile_count(client, key) == 2


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_a_retry_waits_for_an_uncommitted_first_request(client, make_key, pool, database_url, workspace,
                                                              outcome):
    """Another process's flush holds the key uncommitted: the retry waits on it, then is answered as a retry
    if it committed, or claims the key and stores its event if it rolled back."""
    key = await make_key()
    ws = await workspace_id(database_url, workspace)
    earlier = store.Claim("held", hashlib.sha256(b"POST /v1/events\n" + EVENT).digest(),
                          b'{"id":"evt_first","status":"received","received_at":"2026-11-28T00:00:00.000Z"}')
    conn = await pool.acquire()
    try:
        tx = conn.transaction()
        await tx.start()
        assert await store.claim(conn, ws, "live", [earlier]) == ({"held"}, {})
        retry = asyncio.create_task(_post(client, key, idempotency_key="held"))
        await asyncio.sleep(0.3)
        assert not retry.done()  # waiting on the first request's key
        await (tx.commit() if outcome == "commit" else tx.rollback())
        resp = await retry
    finally:
        await pool.release(conn)
    assert resp.status == 200
    body = await resp.json()
    stored = await _stored(database_url, workspace)
    if outcome == "commit":
        assert body["id"] == "evt_first" and resp.headers["Idempotent-Replayed"] == "true" and stored == []
    else:
        assert [r["id"] for r in stored] == [body["id"]] and "Idempotent-Replayed" not in resp.headers


@pytest.mark.parametrize("value", ["", "x" * 256, "tab\tinside", "caf\u00e9"])
@pytest.mark.parametrize("path", ["/v1/events", "/v1/events/batch"])
async def test_a_bad_idempotency_key_is_400_and_stores_nothing(client, make_key, database_url, workspace, path,
                                                               value):
    key = await make_key()
    body = EVENT if path == "/v1/events" else BATCH
    headers = {**_headers(key), "Idempotency-Key": value}
    resp = await client.post(path, data=body, headers=headers)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"][0]["field"] == "Idempotency-Key" and error["message"].startswith("Idempotency-Key: ")
    assert await _stored(database_url, workspace) == []


async def test_an_idempotency_key_sent_twice_is_400(client, make_key, database_url, workspace):
    from multidict import CIMultiDict

    key = await make_key()
    headers = CIMultiDict(_headers(key))
    headers.add("Idempotency-Key", "a")
    headers.add("Idempotency-Key", "b")
    resp = await client.post("/v1/events", data=EVENT, headers=headers)
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"] == [{"field": "Idempotency-Key", "message": "sent more than once"}]
    assert await _stored(database_url, workspace) == []


async def test_a_255_character_key_of_printable_ascii_is_taken(client, make_key, database_url, workspace):
    key = await make_key()
    value = ("a b~!" * 51)[:255]
    first, again = [await _post(client, key, idempotency_key=value) for _ in range(2)]
    assert first.status == again.status == 200 and await first.json() == await again.json()
    assert len(await _stored(database_url, workspace)) == 1


async def test_without_the_header_identical_posts_are_two_events(client, make_key, database_url, workspace):
    key = await make_key()
    for path, body in (("/v1/events", EVENT), ("/v1/events", EVENT), ("/v1/events/batch", BATCH),
                       ("/v1/events/batch", BATCH)):
        resp = await _post(client, key, body, path=path)
        assert resp.status == 200 and "Idempotent-Replayed" not in resp.headers
    assert len(await _stored(database_url, workspace)) == 6


async def test_a_failed_flush_leaves_the_key_claimable(client, make_key, database_url, workspace):
    key = await make_key()
    ws = await workspace_id(database_url, workspace)
    conn = await connect(database_url)
    constraint = f"poison_idem_{ws}"
    poison = json.dumps({"event": "poison", "user_id": "u1"}).encode()
    try:
        await conn.execute(f"ALTER TABLE events ADD CONSTRAINT {constraint} "
                           f"CHECK (NOT (workspace_id = {int(ws)} AND name = 'poison')) NOT VALID")
        failed = await _post(client, key, poison, "try-1")
        assert failed.status == 500 and (await failed.json())["error"]["code"] == "store_failed"
    finally:
        await conn.execute(f"ALTER TABLE events DROP CONSTRAINT {constraint}")
        await conn.close()
    stored = await _post(client, key, poison, "try-1")
    assert stored.status == 200 and "Idempotent-Replayed" not in stored.headers
    again = await _post(client, key, poison, "try-1")
    assert again.status == 200 and await again.json() == await stored.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert [r["id"] for r in await _stored(database_url, workspace)] == [(await stored.json())["id"]]


async def test_keys_are_forgotten_after_48_hours(client, make_key, pool, database_url, workspace):
    from app.appkeys import SCHEDULER
    from app.idempotency import JOB

    key = await make_key()
    ws = await workspace_id(database_url, workspace)
    first = await _post(client, key, idempotency_key="old")
    await pool.execute("UPDATE idempotency_keys SET created_at = now() - interval '49 hours' "
                       "WHERE workspace_id = $1 AND key = 'old'", ws)
    await pool.execute("INSERT INTO idempotency_keys (workspace_id, env, key, request_sha256, response, created_at) "
                       "VALUES ($1, 'live', 'recent', '\\x00', '{}', now() - interval '25 hours')", ws)
    assert await client.app[SCHEDULER].run_now(JOB)
    left = {r["key"] for r in await pool.fetch("SELECT key FROM idempotency_keys WHERE workspace_id = $1", ws)}
    assert left == {"recent"}
    # Past the window the key is new again: the request is stored a second time.
    again = await _post(client, key, idempotency_key="old")
    assert again.status == 200 and (await again.json())["id"] != (await first.json())["id"]
    assert len(await _stored(database_url, workspace)) == 2


async def test_pruning_is_bounded_per_run(pool, database_url, client, make_key, workspace):
    await make_key()
    ws = await workspace_id(database_url, workspace)
    await pool.execute("INSERT INTO idempotency_keys (workspace_id, env, key, request_sha256, response, created_at) "
                       "SELECT $1, 'live', 'k' || i, '\\x00', '{}', now() - interval '50 hours' "
                       "FROM generate_series(1, 25) AS i", ws)
    async with pool.acquire() as conn:
        assert await store.prune(conn, 48, chunk=10, rounds=2) == 20
        assert await pool.fetchval("SELECT count(*) FROM idempotency_keys WHERE workspace_id = $1", ws) <= 5
        assert await store.prune(conn, 48, chunk=10, rounds=2) >= 5
        assert await pool.fetchval("SELECT count(*) FROM idempotency_keys WHERE workspace_id = $1", ws) == 0


class _PrunedAfterTheClaim(asyncpg.Connection):
    """A connection on which the prune job runs, and commits, right after the first claim statement: the key
    was taken when claimed and is gone when read."""

    prune = None

    async def fetch(self, query, *args, **kwargs):
        rows = await super().fetch(query, *args, **kwargs)
        if query == store.CLAIM and self.prune is not None:
            prune, self.prune = self.prune, None
            await prune()
        return rows


async def test_a_key_pruned_between_its_claim_and_its_read_is_claimed_afresh(pool, database_url, client,
                                                                             make_key, workspace):
    await make_key()
    ws = await workspace_id(database_url, workspace)
    await pool.execute("INSERT INTO idempotency_keys (workspace_id, env, key, request_sha256, response, created_at) "
                       "VALUES ($1, 'live', 'old', '\\x00', '{}', now() - interval '49 hours')", ws)
    conn = await asyncpg.connect(database_url, connection_class=_PrunedAfterTheClaim)
    try:
        async def prune() -> None:
            async with pool.acquire() as other:
                assert await store.prune(other, 48, chunk=10, rounds=1) == 1

        conn.prune = prune
        async with conn.transaction():
            fresh, earlier = await store.claim(conn, ws, "live", [store.Claim("old", b"\x01", b'{"id": 2}')])
    finally:
        await conn.close()
    # Before, the key was neither claimed nor found: the request answered 500 and stored nothing.
    assert (fresh, earlier) == ({"old"}, {})
    row = await pool.fetchrow("SELECT request_sha256, response FROM idempotency_keys WHERE workspace_id = $1 "
                              "AND key = 'old'", ws)
    assert (bytes(row["request_sha256"]), bytes(row["response"])) == (b"\x01", b'{"id": 2}')
