"""The Segment HTTP Tracking API: write keys, every path, Segment's limits and error shape, the mapping onto
Tally's events and profiles, messageId dedupe, and the source's status."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from tests.conftest import bearer


def basic(write_key: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{write_key}:".encode()).decode()}


async def create_source(client, key: str, **credentials) -> dict:
    resp = await client.post("/v1/data-sources", headers=bearer(key),
                             json={"name": "web", "type": "segment", "credentials": credentials})
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def events(client, key: str, **query) -> list[dict]:
    resp = await client.get("/v1/events", headers=bearer(key), params={"limit": "1000", **query})
    assert resp.status == 200
    return (await resp.json())["data"]


async def user(client, key: str, user_id: str) -> dict | None:
    resp = await client.get(f"/v1/users/{user_id}", headers=bearer(key))
    return await resp.json() if resp.status == 200 else None


async def source(client, key: str, source_id: str) -> dict:
    return await (await client.get(f"/v1/data-sources/{source_id}", headers=bearer(key))).json()


def ms(at: datetime) -> datetime:
    """Truncated to the millisecond, as the API renders times."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def mid() -> str:
    return str(uuid.uuid4())


async def test_generated_write_key_is_shown_once_and_stored_as_a_hash(client, make_key, pool):
    key = await make_key()
    created = await create_source(client, key)
    write_key = created["write_key"]
    assert len(write_key) >= 32 and created["status"] == "testing"
    got = await source(client, key, created["id"])
    assert "write_key" not in got and "credentials" not in got
    listed = await (await client.get("/v1/data-sources", headers=bearer(key))).json()
    assert write_key not in str(listed) and write_key not in str(got)
    row = await pool.fetchrow("SELECT credentials, write_key_hash FROM data_sources WHERE id = $1", created["id"])
    assert write_key.encode() not in bytes(row["credentials"]) and len(row["write_key_hash"]) == 32
    resp = await client.post("/v1/track", headers=basic(write_key), json={"event": "Signed Up", "userId": "u1"})
    assert resp.status == 200 and await resp.json() == {"success": True}


async def test_own_write_key_is_kept_and_cannot_be_registered_twice(client, make_key, workspace):
    key = await make_key()
    created = await create_source(client, key, write_key="MyExistingSegmentKey123")
    assert "write_key" not in created
    other = await make_key(workspace_name=workspace + "-b")
    resp = await client.post("/v1/data-sources", headers=bearer(other), json={
        "name": "dup", "type": "segment", "credentials": {"write_key": "MyExistingSegmentKey123"}})
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "conflict"
    bad = await client.post("/v1/data-sources", headers=bearer(key), json={
        "name": "x", "type": "segment", "credentials": {"write_key": "has:colon"}})
    assert bad.status == 400 and (await bad.json())["error"]["fields"][0]["field"] == "credentials.write_key"


async def test_every_call_type_maps_onto_events_and_profiles(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    calls = [
        ("/v1/identify", {"userId": "u1", "traits": {"email": "a@b.co", "plan": "free"}}),
        ("/v1/i", {"userId": "u1", "traits": {"plan": "pro"}}),
        ("/v1/track", {"userId": "u1", "event": "Order Completed", "properties": {"total": 42}}),
        ("/v1/t", {"anonymousId": "anon-1", "event": "productViewed", "properties": {"sku": "A"}}),
        ("/v1/page", {"userId": "u1", "name": "Pricing", "category": "Docs", "properties": {"path": "/pricing"}}),
        ("/v1/p", {"userId": "u1", "name": "Home"}),
        ("/v1/screen", {"userId": "u1", "name": "Settings", "category": "App"}),
        ("/v1/s", {"userId": "u1", "name": "Feed"}),
        ("/v1/group", {"userId": "u1", "groupId": "acme", "traits": {"name": "Acme Inc", "seats": 12}}),
        ("/v1/g", {"userId": "u2", "groupId": "initech"}),
    ]
    for path, body in calls:
        resp = await client.post(path, headers=basic(wk), json={"messageId": mid(), **body})
        assert resp.status == 200, (path, await resp.text())
        assert await resp.json() == {"success": True}
        assert "X-RateLimit-Limit" in resp.headers
    rows = sorted(((e["event"], e["user_id"], e["anonymous_id"], e["properties"]) for e in await events(client, key)),
                  key=repr)
    assert rows == sorted([
        ("order_completed", "u1", None, {"total": 42}),
        ("product_viewed", None, "anon-1", {"sku": "A"}),
        ("page_viewed", "u1", None, {"path": "/pricing", "name": "Pricing", "category": "Docs"}),
        ("page_viewed", "u1", None, {"name": "Home"}),
        ("screen_viewed", "u1", None, {"name": "Settings", "category": "App"}),
        ("screen_viewed", "u1", None, {"name": "Feed"}),
    ], key=repr)
    u1 = await user(client, key, "u1")
    assert u1["traits"] == {"email": "a@b.co", "plan": "pro", "group": {"id": "acme", "name": "Acme Inc", "seats": 12}}
    assert u1["event_count"] == 5
    assert (await user(client, key, "u2"))["traits"] == {"group": {"id": "initech"}}


def test_event_names_become_snake_case():
    from app.segment.messages import event_name

    assert event_name("Order Completed") == "order_completed"
    assert event_name("orderCompleted") == "order_completed"
    assert event_name("  Signed-Up! (v2) ") == "signed_up_v2"
    assert event_name("404 Seen") == "e_404_seen"
    assert event_name("already_snake") == "already_snake"
    assert event_name("Crème Brûlée Ordered") == "creme_brulee_ordered"
    assert event_name("注文完了") == event_name("注文完了") != event_name("購入")
    assert event_name("注文完了").startswith("e_") and len(event_name("x" * 300)) == 128


async def test_alias_merges_the_previous_profile_and_events(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    h = basic(wk)
    for body in ({"type": "track", "anonymousId": "anon-7", "event": "Viewed Pricing"},
                 {"type": "identify", "userId": "old-id", "traits": {"plan": "free", "email": "old@x.co"}},
                 {"type": "track", "userId": "old-id", "event": "Logged In"},
                 {"type": "identify", "userId": "new-id", "traits": {"email": "new@x.co"}},
                 {"type": "track", "userId": "new-id", "event": "Logged In"}):
        resp = await client.post(f"/v1/{body.pop('type')}", headers=h, json={"messageId": mid(), **body})
        assert resp.status == 200
    for previous in ("old-id", "anon-7"):
        resp = await client.post("/v1/a", headers=h, json={"messageId": mid(), "previousId": previous,
                                                            "userId": "new-id"})
        assert resp.status == 200, await resp.text()
    assert await user(client, key, "old-id") is None
    merged = await user(client, key, "new-id")
    assert merged["traits"] == {"plan": "free", "email": "new@x.co"}  # the new id's own traits win
    assert merged["event_count"] == 3
    assert sorted(e["event"] for e in await events(client, key, user_id="new-id")) == [
        "logged_in", "logged_in", "viewed_pricing"]
    assert await events(client, key, user_id="old-id") == []


async def test_alias_of_an_anonymous_id_starts_the_profile_at_its_first_event(client, make_key):
    """The profile alias makes from anonymous events begins at their earliest timestamp, not at the time they
    were received, so created_at is never after last_seen_at; an older identify of the target still wins."""
    key = await make_key()
    h = basic((await create_source(client, key))["write_key"])
    for body in ({"type": "track", "anonymousId": "anon_al", "event": "Viewed", "timestamp": "2026-11-20T10:00:00Z"},
                 {"type": "track", "anonymousId": "anon_al", "event": "Viewed", "timestamp": "2026-11-21T10:00:00Z"},
                 {"type": "alias", "previousId": "anon_al", "userId": "al_user"},
                 {"type": "track", "anonymousId": "anon_b", "event": "Viewed", "timestamp": "2026-11-20T10:00:00Z"},
                 {"type": "identify", "userId": "b_user", "timestamp": "2026-11-05T10:00:00Z"},
                 {"type": "alias", "previousId": "anon_b", "userId": "b_user"}):
        resp = await client.post(f"/v1/{body.pop('type')}", headers=h, json={"messageId": mid(), **body})
        assert resp.status == 200, await resp.text()
    profile = await user(client, key, "al_user")
    assert profile["created_at"] == "2026-11-20T10:00:00.000Z"
    assert profile["last_seen_at"] == "2026-11-21T10:00:00.000Z" and profile["event_count"] == 2
    profile = await user(client, key, "b_user")
    assert profile["created_at"] == "2026-11-05T10:00:00.000Z" and profile["event_count"] == 1


async def test_write_key_in_the_body_and_auth_failures(client, make_key):
    key = await make_key()
    created = await create_source(client, key)
    wk = created["write_key"]
    ok = await client.post("/v1/track", json={"writeKey": wk, "event": "A", "userId": "u"})
    assert ok.status == 200
    ok = await client.post("/v1/batch", json={"writeKey": wk,
                                              "batch": [{"type": "track", "event": "B", "userId": "u"}]})
    assert ok.status == 200 and (await ok.json())["received"] == 1
    for headers, body in (({}, {"event": "A", "userId": "u"}),
                          (basic("wrong-key-123"), {"event": "A", "userId": "u"}),
                          ({}, {"writeKey": "wrong-key-123", "event": "A", "userId": "u"})):
        resp = await client.post("/v1/track", headers=headers, json=body)
        assert resp.status == 401, await resp.text()
        error = await resp.json()
        assert error["code"] == "unauthorized" and error["message"]
        assert "X-RateLimit-Limit" in resp.headers
    assert (await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(key))).status == 200
    await asyncio.sleep(2.1)  # the write-key cache lives key_cache_seconds
    paused = await client.post("/v1/track", headers=basic(wk), json={"event": "A", "userId": "u"})
    assert paused.status == 403 and (await paused.json())["code"] == "source_paused"
    assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 204
    await asyncio.sleep(2.1)
    gone = await client.post("/v1/track", headers=basic(wk), json={"event": "A", "userId": "u"})
    assert gone.status == 401
    assert sorted(e["event"] for e in await events(client, key)) == ["a", "b"]


async def test_bearer_identify_keeps_tally_semantics(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    tally = await client.post("/v1/identify", headers=bearer(key), json={"user_id": "u9", "traits": {"a": 1}})
    assert tally.status == 200 and (await tally.json())["status"] == "identified"
    # A Tally-shaped body with a Bearer key that is wrong: Tally's 401, not Segment's.
    wrong = await client.post("/v1/identify", headers=bearer("tally_live_sk_" + "x" * 40), json={"user_id": "u9"})
    assert wrong.status == 401 and (await wrong.json())["error"]["code"] == "unauthorized"
    seg = await client.post("/v1/identify", headers=basic(wk), json={"userId": "u9", "traits": {"b": 2}})
    assert seg.status == 200 and await seg.json() == {"success": True}
    assert (await user(client, key, "u9"))["traits"] == {"a": 1, "b": 2}


async def test_segment_limits_answer_400_in_segments_shape_and_store_nothing(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    big = {"event": "A", "userId": "u", "properties": {"blob": "x" * (32 * 1024)}}
    resp = await client.post("/v1/track", headers=basic(wk), json=big)
    assert resp.status == 400
    assert set(await resp.json()) == {"code", "message"} and "32 KB" in (await resp.json())["message"]
    item = {"type": "track", "event": "A", "userId": "u", "properties": {"blob": "x" * (31 * 1024)}}
    resp = await client.post("/v1/batch", headers=basic(wk), json={"batch": [item] * 17})  # > 500 KB
    assert resp.status == 400 and "500 KB" in (await resp.json())["message"]
    resp = await client.post("/v1/batch", headers=basic(wk), json={"batch": [{**big, "type": "track"}]})
    assert resp.status == 400 and "per message" in (await resp.json())["message"]
    small = [{**item, "properties": {"blob": "x" * 1000}}] * 400  # about 430 KB: accepted
    resp = await client.post("/v1/batch", headers=basic(wk), json={"batch": small})
    assert resp.status == 200 and (await resp.json())["received"] == 400
    assert len(await events(client, key)) == 400


async def test_invalid_messages(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    for path, body, needle in (("/v1/track", {"userId": "u"}, "event"),
                               ("/v1/track", {"event": "A"}, "userId"),
                               ("/v1/track", {"event": "  ", "userId": "u"}, "event"),
                               ("/v1/group", {"userId": "u"}, "groupId"),
                               ("/v1/alias", {"userId": "u"}, "previousId"),
                               ("/v1/track", {"event": "A", "userId": "u", "timestamp": "yesterday"}, "timestamp"),
                               ("/v1/track", {"event": "A", "userId": "u", "properties": {"k": "a\u0000"}}, "NUL"),
                               ("/v1/track", {"event": "A", "userId": "u", "timestamp": "0001-01-01T00:00:00Z",
                                              "sentAt": "9999-12-31T00:00:00Z"}, "timestamp"),
                               ("/v1/track", {"event": "A", "userId": True}, "userId")):
        resp = await client.post(path, headers=basic(wk), json=body)
        assert resp.status == 400, (body, await resp.text())
        assert needle in (await resp.json())["message"]
    for raw in (b"{", b'{"event": "A", "userId": 1e400}'):
        resp = await client.post("/v1/track", headers={**basic(wk), "Content-Type": "application/json"}, data=raw)
        assert resp.status == 400 and (await resp.json())["code"] == "invalid_request"
        assert "X-RateLimit-Remaining" in resp.headers
    batch = [{"type": "track", "event": "Fine", "userId": "u"}, {"type": "track", "userId": "u"},
             {"type": "jump", "userId": "u"}, {"type": "page", "anonymousId": "a"}]
    resp = await client.post("/v1/batch", headers=basic(wk), json={"batch": batch})
    body = await resp.json()
    assert resp.status == 200 and body["received"] == 2 and body["failed"] == 2
    assert [e["index"] for e in body["errors"]] == [1, 2]
    assert sorted(e["event"] for e in await events(client, key)) == ["fine", "page_viewed"]


async def test_message_id_dedupes_retries_and_racing_deliveries(client, make_key, pool):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    batch = {"batch": [{"type": "track", "event": f"E{i}", "userId": "u", "messageId": f"m-{i}"} for i in range(50)]
             + [{"type": "identify", "userId": "u", "traits": {"n": 1}, "messageId": "m-id"}]}
    first = await asyncio.gather(*[client.post("/v1/batch", headers=basic(wk), json=batch) for _ in range(4)])
    assert [r.status for r in first] == [200] * 4
    retry = await client.post("/v1/batch", headers=basic(wk), json=batch)
    assert retry.status == 200
    again = await client.post("/v1/track", headers=basic(wk), json={"event": "E1", "userId": "u", "messageId": "m-1"})
    assert again.status == 200
    rows = await events(client, key)
    assert len(rows) == 50 and len({e["event"] for e in rows}) == 50
    assert (await user(client, key, "u"))["event_count"] == 50
    # Events alone take the one-statement path: racing copies of such a batch store nothing twice either.
    tracks = {"batch": [{"type": "track", "event": "Raced", "userId": "r", "messageId": f"r-{i}"} for i in range(30)]}
    raced = await asyncio.gather(*[client.post("/v1/batch", headers=basic(wk), json=tracks) for _ in range(4)])
    assert [r.status for r in raced] == [200] * 4
    assert len(await events(client, key, event="raced")) == 30
    assert (await user(client, key, "r"))["event_count"] == 30
    # The same messageId within one batch counts once; another source's ids are its own.
    twice = {"batch": [{"type": "track", "event": "Dup", "userId": "u", "messageId": "same"}] * 2}
    assert (await (await client.post("/v1/batch", headers=basic(wk), json=twice)).json())["received"] == 2
    assert len(await events(client, key, event="dup")) == 1
    wk2 = (await create_source(client, key))["write_key"]
    assert (await client.post("/v1/batch", headers=basic(wk2), json=twice)).status == 200
    assert len(await events(client, key, event="dup")) == 2
    # Without a messageId nothing is deduped (Segment's SDKs always send one).
    for _ in range(2):
        assert (await client.post("/v1/track", headers=basic(wk), json={"event": "NoId", "userId": "u"})).status == 200
    assert len(await events(client, key, event="no_id")) == 2


async def test_dedupe_window_is_pruned_after_48_hours(client, make_key, pool):
    from app.appkeys import SCHEDULER
    from app.segment.upkeep import JOB

    await pool.execute("INSERT INTO segment_messages VALUES ('src_x', 'old', now() - interval '49 hours'), "
                       "('src_x', 'recent', now() - interval '25 hours')")
    assert await client.app[SCHEDULER].run_now(JOB)
    rows = await pool.fetch("SELECT message_id FROM segment_messages WHERE source_id = 'src_x'")
    left = {r["message_id"] for r in rows}
    assert left == {"recent"}


async def test_timestamp_is_corrected_by_sent_at_clock_skew(client, make_key):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    device_now = datetime.now(UTC) + timedelta(hours=3)  # the device's clock runs 3 hours ahead
    body = {"event": "Skewed", "userId": "u", "timestamp": (device_now - timedelta(minutes=10)).isoformat(),
            "sentAt": device_now.isoformat()}
    before = datetime.now(UTC)
    assert (await client.post("/v1/track", headers=basic(wk), json=body)).status == 200
    after = datetime.now(UTC)
    [row] = await events(client, key)
    stored = datetime.fromisoformat(row["timestamp"])
    assert before - timedelta(minutes=10, seconds=1) <= stored <= after - timedelta(minutes=10) + timedelta(seconds=1)
    # Batch-level sentAt (what the SDKs send) corrects every message; without sentAt the timestamp is kept.
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    device_now = datetime.now(UTC) - timedelta(days=1)  # a day behind now
    resp = await client.post("/v1/batch", headers=basic(wk), json={"sentAt": device_now.isoformat(), "batch": [
        {"type": "track", "event": "Batched", "userId": "u",
         "timestamp": (device_now - timedelta(hours=1)).isoformat()}]})
    assert resp.status == 200
    [batched] = await events(client, key, event="batched")
    lag = datetime.now(UTC) - datetime.fromisoformat(batched["timestamp"])
    assert timedelta(minutes=59) < lag < timedelta(minutes=61)
    assert (await client.post("/v1/track", headers=basic(wk), json={"event": "Kept", "userId": "u",
                                                                    "timestamp": at.isoformat()})).status == 200
    [kept] = await events(client, key, event="kept")
    assert kept["timestamp"] == "2026-01-02T03:04:05.000Z"


async def test_source_turns_active_on_first_call_and_follows_deliveries(client, make_key, pool):
    key = await make_key()
    created = await create_source(client, key)
    wk = created["write_key"]
    assert (await source(client, key, created["id"]))["last_synced_at"] is None
    # Invalid calls are not accepted: the source stays in testing.
    assert (await client.post("/v1/track", headers=basic(wk), json={"userId": "u"})).status == 400
    assert (await source(client, key, created["id"]))["status"] == "testing"
    before = datetime.now(UTC)
    assert (await client.post("/v1/track", headers=basic(wk), json={"event": "A", "userId": "u"})).status == 200
    first = await source(client, key, created["id"])
    assert first["status"] == "active" and datetime.fromisoformat(first["last_synced_at"]) >= ms(before)
    # last_synced_at follows deliveries to the second: an hour-old value moves to the next delivery's time,
    # through the events-only path and through the one with profiles.
    for path, body in (("/v1/t", {"event": "B", "userId": "u"}), ("/v1/i", {"userId": "u", "traits": {"a": 1}})):
        await pool.execute("UPDATE data_sources SET last_synced_at = now() - interval '1 hour' WHERE id = $1",
                           created["id"])
        before = datetime.now(UTC)
        assert (await client.post(path, headers=basic(wk), json=body)).status == 200
        later = await source(client, key, created["id"])
        assert datetime.fromisoformat(later["last_synced_at"]) >= ms(before) and later["status"] == "active"
    sync = await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))
    assert sync.status == 409 and "nothing to sync" in (await sync.json())["error"]["message"]


async def test_scheduled_runner_leaves_segment_sources_alone(client, make_key, pool):
    from app.sources.runner import RUNNER
    from tests.test_data_sources import park_other_sources

    key = await make_key()
    created = await create_source(client, key)
    await park_other_sources(pool, created["id"])
    await client.app[RUNNER].run_due()
    assert (await source(client, key, created["id"]))["status"] == "testing"
    assert client.app[RUNNER].running == []


async def test_rate_limit_is_the_events_group_per_source(client, make_key, database_url, workspace):
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE workspaces SET plan = 'enterprise', rate_limits = '{\"events\": [2, 100]}' "
                           "WHERE name = $1", workspace)
    finally:
        await conn.close()
    statuses = []
    for _ in range(3):
        resp = await client.post("/v1/track", headers={**basic(wk), "Origin": "https://shop.example"},
                                 json={"event": "A", "userId": "u"})
        statuses.append(resp.status)
    assert statuses[:2] == [200, 200] and statuses[2] == 429
    assert resp.headers["X-RateLimit-Limit"] == "2" and "Retry-After" in resp.headers
    # analytics.js in a page waits as Retry-After says: the browser lets it read only the exposed headers.
    assert resp.headers["Access-Control-Expose-Headers"] == "Retry-After"
    assert (await resp.json())["code"] == "rate_limited"
    # A Tally key's own events allowance is separate.
    assert (await client.post("/v1/events", headers=bearer(key), json={"event": "a", "user_id": "u"})).status == 200


async def test_gzip_bodies_are_accepted(client, make_key):
    """segment-analytics-python's gzip=True option sends Content-Encoding: gzip."""
    key = await make_key()
    wk = (await create_source(client, key))["write_key"]
    body = gzip.compress(json.dumps({"batch": [{"type": "track", "event": "Zipped", "userId": "u"}]}).encode())
    resp = await client.post("/v1/batch", data=body, headers={**basic(wk), "Content-Type": "application/json",
                                                              "Content-Encoding": "gzip"})
    assert resp.status == 200 and (await resp.json())["received"] == 1
    assert [e["event"] for e in await events(client, key)] == ["zipped"]


async def test_a_delivery_racing_an_uncommitted_one_waits_and_stores_nothing_twice(client, make_key, pool,
                                                                                   database_url, workspace):
    """The ledger at the database level: the second flush blocks on the first's uncommitted messageIds, then
    skips them if it committed, or stores them if it rolled back."""
    from storage import segment as store
    from storage.events import EventRow
    from tests.reports_support import workspace_id

    key = await make_key()
    source_id = (await create_source(client, key))["id"]
    ws = await workspace_id(database_url, workspace)
    now = datetime.now(UTC)

    def items(tag: str) -> list[tuple]:
        return [(source_id, f"{tag}-{i}", EventRow(f"evt_{tag}{i}_{uuid.uuid4().hex[:8]}", ws, "live", "raced", now,
                                                   now, user_id="u", properties={"i": i})) for i in range(3)]

    for outcome in ("commit", "rollback"):
        first, second = await pool.acquire(), await pool.acquire()
        try:
            tx = first.transaction()
            await tx.start()
            await store.store_events(first, ws, "live", items(outcome), now)
            racing = asyncio.create_task(store.store_events(second, ws, "live", items(outcome), now))
            await asyncio.sleep(0.2)
            assert not racing.done()  # waiting on the first delivery's keys
            await (tx.commit() if outcome == "commit" else tx.rollback())
            await racing
        finally:
            await pool.release(first)
            await pool.release(second)
        ids = await pool.fetch("SELECT id FROM events WHERE workspace_id = $1 AND name = 'raced' "
                               "AND properties->>'i' IS NOT NULL AND id LIKE $2", ws, f"evt_{outcome}%")
        assert len(ids) == 3, outcome
