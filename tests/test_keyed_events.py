"""POST /v1/events, POST /v1/events/batch and GET /v1/events."""

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from tests.conftest import bearer


async def _stored(database_url: str, event_id: str):
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchrow("SELECT * FROM events WHERE id = $1", event_id)
    finally:
        await conn.close()


async def _count(database_url: str, key: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval(
            "SELECT count(*) FROM events e JOIN api_keys k ON k.workspace_id = e.workspace_id AND k.env = e.env "
            "WHERE k.key_hash = sha256($1::text::bytea)", key)
    finally:
        await conn.close()


async def test_single_event_is_stored_before_200(client, make_key, database_url):
    key = await make_key("write")
    resp = await client.post("/v1/events", headers=bearer(key), json={
        "event": "signup", "user_id": "u1", "properties": {"plan": "pro", "seats": 3},
        "timestamp": "2026-11-20T10:00:00.250Z"})
    assert resp.status == 200
    body = await resp.json()
    assert body["status"] == "received" and body["id"].startswith("evt_")
    assert body["received_at"].endswith("Z") and len(body["received_at"]) == len("2026-11-20T10:00:00.250Z")
    row = await _stored(database_url, body["id"])
    assert row["name"] == "signup" and row["user_id"] == "u1" and row["env"] == "live"
    assert row["ts"] == datetime(2026, 11, 20, 10, 0, 0, 250000, tzinfo=UTC)
    assert row["site_id"] is None


async def test_timestamp_defaults_to_server_time(client, make_key, database_url):
    key = await make_key("write")
    before = datetime.now(UTC)
    body = await (await client.post("/v1/events", headers=bearer(key),
                                    json={"event": "opened", "anonymous_id": "anon-1"})).json()
    row = await _stored(database_url, body["id"])
    assert row["anonymous_id"] == "anon-1" and row["user_id"] is None
    assert before - timedelta(seconds=1) <= row["ts"] <= datetime.now(UTC)


@pytest.mark.parametrize(("payload", "field"), [
    ({"user_id": "u1"}, "event"),
    ({"event": "Signup Done", "user_id": "u1"}, "event"),
    ({"event": "x" * 129, "user_id": "u1"}, "event"),
    ({"event": "signup"}, "user_id"),
    ({"event": "signup", "user_id": ""}, "user_id"),
    ({"event": "signup", "user_id": 42}, "user_id"),
    ({"event": "signup", "user_id": "u", "properties": [1, 2]}, "properties"),
    ({"event": "signup", "user_id": "u", "timestamp": "yesterday"}, "timestamp"),
    ({"event": "signup", "user_id": "u", "timestamp": "2026-01-01T00:00:00"}, "timestamp"),
    ({"event": "signup", "user_id": "u", "timestamp": "1999-12-31T00:00:00Z"}, "timestamp"),
])
async def test_invalid_event_is_400_naming_the_field(client, make_key, database_url, payload, field):
    key = await make_key("write")
    resp = await client.post("/v1/events", headers=bearer(key), json=payload)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"][0]["field"] == field
    assert await _count(database_url, key) == 0


async def test_null_properties_and_traits_mean_none(client, make_key):
    """null for an optional field means absent, as it already did for user_id, anonymous_id and timestamp, and as
    Segment's calls take it: a client that serialises an unset map as null (Jackson's default, Go's nil map)
    had every such event and identify refused with a 400 on properties or traits."""
    key = await make_key("read,write")
    single = await client.post("/v1/events", headers=bearer(key),
                               json={"event": "signup", "user_id": "u", "properties": None})
    assert single.status == 200, await single.text()
    batch = await client.post("/v1/events/batch", headers=bearer(key),
                              json={"events": [{"event": "login", "user_id": "u", "properties": None}]})
    assert (await batch.json()) == {"received": 1, "failed": 0}
    identify = await client.post("/v1/identify", headers=bearer(key), json={"user_id": "u", "traits": None})
    assert identify.status == 200, await identify.text()
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert [(e["event"], e["properties"]) for e in listed["data"]] == [("login", {}), ("signup", {})]
    profile = await (await client.get("/v1/users/u", headers=bearer(key))).json()
    assert profile["traits"] == {} and profile["event_count"] == 2


@pytest.mark.parametrize("body", [b"{not json", b"", b"[]", b'"text"'])
async def test_malformed_json_is_400(client, make_key, body):
    key = await make_key("write")
    resp = await client.post("/v1/events", headers={**bearer(key), "Content-Type": "application/json"}, data=body)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"
    assert "X-RateLimit-Limit" in resp.headers


async def test_oversized_body_is_413(client, make_key):
    key = await make_key("write")
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "big", "user_id": "u", "properties": {"x": "y" * 70_000}})
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "payload_too_large"


async def test_batch_ingests_valid_items_and_reports_the_rest(client, make_key, database_url):
    key = await make_key("write,read")
    events = [{"event": "a", "user_id": "u1"}, {"event": "Bad"}, {"event": "b", "anonymous_id": "x"},
              {"user_id": "u2"}, "not an object"]
    resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": events})
    assert resp.status == 200
    body = await resp.json()
    assert body["received"] == 2 and body["failed"] == 3
    assert [e["index"] for e in body["errors"]] == [1, 3, 4]
    assert all(e["code"] == "invalid_request" and e["message"] for e in body["errors"])
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert sorted(e["event"] for e in listed["data"]) == ["a", "b"]


async def test_a_batch_item_past_the_single_event_limit_fails_alone(client, make_key, database_url):
    """A batch item is the single-event body, so it has that body's 64 KB limit: a 1 MB event refused with 413
    by POST /v1/events was stored when sent in a batch. It fails on its own, as an invalid item does; the
    others are stored."""
    key = await make_key("write,read")
    big = {"event": "big", "user_id": "u", "properties": {"x": "y" * 70_000}}
    resp = await client.post("/v1/events/batch", headers=bearer(key),
                             json={"events": [{"event": "small", "user_id": "u"}, big]})
    assert resp.status == 200
    body = await resp.json()
    assert body["received"] == 1 and body["failed"] == 1
    assert body["errors"][0]["index"] == 1 and body["errors"][0]["code"] == "payload_too_large"
    assert await _count(database_url, key) == 1


async def test_batch_of_1000_is_accepted_and_1001_refused_whole(client, make_key, database_url):
    key = await make_key("write")
    ok = await client.post("/v1/events/batch", headers=bearer(key),
                           json={"events": [{"event": "e", "user_id": f"u{i}"} for i in range(1000)]})
    assert ok.status == 200 and (await ok.json())["received"] == 1000
    over = await client.post("/v1/events/batch", headers=bearer(key),
                             json={"events": [{"event": "e", "user_id": "u"}] * 1001})
    assert over.status == 400
    assert (await over.json())["error"]["fields"][0]["field"] == "events"
    assert await _count(database_url, key) == 1000


async def test_batch_without_events_array_is_400(client, make_key):
    key = await make_key("write")
    for body in ({}, {"events": "nope"}):
        resp = await client.post("/v1/events/batch", headers=bearer(key), json=body)
        assert resp.status == 400


async def test_listing_filters_and_order(client, make_key):
    key = await make_key("read,write")
    base = datetime(2026, 11, 1, tzinfo=UTC)
    events = [{"event": "view" if i % 2 else "click", "user_id": f"u{i % 3}",
               "timestamp": (base + timedelta(hours=i)).isoformat()} for i in range(10)]
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": events})

    async def ids(**params):
        resp = await client.get("/v1/events", headers=bearer(key), params=params)
        assert resp.status == 200, await resp.text()
        return [(e["event"], e["user_id"], e["timestamp"]) for e in (await resp.json())["data"]]

    everything = await ids()
    assert [t for *_, t in everything] == sorted([t for *_, t in everything], reverse=True)
    assert len(everything) == 10
    assert {e for e, *_ in await ids(event="view")} == {"view"} and len(await ids(event="view")) == 5
    assert {u for _, u, _ in await ids(user_id="u1")} == {"u1"}
    window = await ids(**{"from": (base + timedelta(hours=2)).isoformat(),
                          "to": (base + timedelta(hours=4)).isoformat()})
    assert [t for *_, t in window] == ["2026-11-01T04:00:00.000Z", "2026-11-01T03:00:00.000Z",
                                       "2026-11-01T02:00:00.000Z"]
    assert len(await ids(limit="3")) == 3


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "ten"}, {"from": "not-a-date"},
                                    {"cursor": "garbage!!"}, {"cursor": "WzFd"}])
async def test_listing_bad_parameters_are_400(client, make_key, params):
    key = await make_key("read")
    resp = await client.get("/v1/events", headers=bearer(key), params=params)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"


async def test_pagination_over_hundreds_of_events_is_complete_and_stable(client, make_key):
    key = await make_key("read,write")
    same_time = "2026-11-02T12:00:00Z"  # many ties on timestamp: the id breaks them
    events = [{"event": "tick", "user_id": "u", "properties": {"n": i},
               **({"timestamp": same_time} if i % 4 == 0 else {})} for i in range(350)]
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": events})
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": "37", **({"cursor": cursor} if cursor else {})}
        body = await (await client.get("/v1/events", headers=bearer(key), params=params)).json()
        seen += [e["id"] for e in body["data"]]
        pages += 1
        if not body["has_more"]:
            assert body["next_cursor"] is None
            break
        cursor = body["next_cursor"]
    assert len(seen) == 350 and len(set(seen)) == 350
    assert pages == 10
    first = await (await client.get("/v1/events", headers=bearer(key), params={"limit": "1000"})).json()
    assert [e["id"] for e in first["data"]] == seen


async def test_default_limit_is_100(client, make_key):
    key = await make_key("read,write")
    await client.post("/v1/events/batch", headers=bearer(key),
                      json={"events": [{"event": "e", "user_id": "u"}] * 150})
    body = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert len(body["data"]) == 100 and body["has_more"] is True


async def test_test_and_live_keys_are_isolated(client, make_key):
    live = await make_key("read,write")
    test = await make_key("read,write", test=True)
    assert test.startswith("tally_test_sk_") and live.startswith("tally_live_sk_")
    await client.post("/v1/events", headers=bearer(live), json={"event": "live_one", "user_id": "u"})
    await client.post("/v1/events", headers=bearer(test), json={"event": "test_one", "user_id": "u"})
    live_events = [e["event"] for e in (await (await client.get("/v1/events", headers=bearer(live))).json())["data"]]
    test_events = [e["event"] for e in (await (await client.get("/v1/events", headers=bearer(test))).json())["data"]]
    assert live_events == ["live_one"] and test_events == ["test_one"]
    test_user = await (await client.get("/v1/users/u", headers=bearer(test))).json()
    assert test_user["event_count"] == 1


async def test_workspaces_never_see_each_other(client, make_key):
    mine = await make_key("read,write")
    theirs = await make_key("read,write", workspace_name="another-workspace-x")
    await client.post("/v1/events", headers=bearer(theirs), json={"event": "secret", "user_id": "them"})
    body = await (await client.get("/v1/events", headers=bearer(mine))).json()
    assert body["data"] == []
    assert (await client.get("/v1/users/them", headers=bearer(mine))).status == 404


async def test_nul_characters_are_refused_not_crashing_the_batch(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "e", "user_id": "u", "properties": {"note": "a\x00b"}})
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == "properties.note"
    resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "ok", "user_id": "u"}, {"event": "e", "user_id": "u\x00"}, {"event": "e", "user_id": "u",
                                                                            "properties": {"k\x00": 1}}]})
    body = await resp.json()
    assert resp.status == 200 and body["received"] == 1 and [e["index"] for e in body["errors"]] == [1, 2]
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert [e["event"] for e in listed["data"]] == ["ok"]


async def test_any_json_number_round_trips(client, make_key):
    key = await make_key("read,write")
    huge = 10**30
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "e", "user_id": "u", "properties": {"big": huge, "neg": -huge, "f": 1.5}})
    assert resp.status == 200
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert listed["data"][0]["properties"] == {"big": huge, "neg": -huge, "f": 1.5}


async def test_absurd_nesting_is_a_400_not_a_crash(client, make_key):
    key = await make_key("write")
    body = b'{"event":"e","user_id":"u","properties":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}"
    resp = await client.post("/v1/events", headers={**bearer(key), "Content-Type": "application/json"}, data=body)
    assert resp.status == 400


async def test_chunked_bodies_are_read_whole(client, make_key):
    key = await make_key("read,write")

    async def chunks():
        for part in (b'{"event": "chunk', b'ed", "user_id"', b': "u", "properties": {"n": 1}}'):
            yield part
            await asyncio.sleep(0.01)

    resp = await client.post("/v1/events", headers={**bearer(key), "Content-Type": "application/json"},
                             data=chunks())
    assert resp.status == 200, await resp.text()
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert listed["data"][0]["event"] == "chunked"


async def test_listing_filters_by_anonymous_id(client, make_key):
    """An anonymous visitor's events can be listed, as its user_id's can: erasure and reports treat the id as a
    user, and without the filter the only way to see what Tally holds under it was to page through everything.
    The filter matches the events' anonymous_id field (identified events sent with it too), combines with the
    other filters, pages, and is validated like user_id."""
    key = await make_key("read,write")
    base = datetime(2026, 11, 1, tzinfo=UTC)
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "view", "anonymous_id": "anon-1", "timestamp": (base + timedelta(hours=1)).isoformat()},
        {"event": "click", "anonymous_id": "anon-1", "timestamp": (base + timedelta(hours=2)).isoformat()},
        {"event": "view", "anonymous_id": "anon-2", "timestamp": (base + timedelta(hours=3)).isoformat()},
        {"event": "signup", "user_id": "u1", "anonymous_id": "anon-1",
         "timestamp": (base + timedelta(hours=4)).isoformat()},
        {"event": "view", "user_id": "u1", "timestamp": (base + timedelta(hours=5)).isoformat()}]})

    async def listed(**params):
        resp = await client.get("/v1/events", headers=bearer(key), params=params)
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        return [(e["event"], e["user_id"], e["anonymous_id"]) for e in body["data"]], body["next_cursor"]

    assert (await listed(anonymous_id="anon-1"))[0] == [
        ("signup", "u1", "anon-1"), ("click", None, "anon-1"), ("view", None, "anon-1")]
    assert (await listed(anonymous_id="anon-1", event="view"))[0] == [("view", None, "anon-1")]
    assert (await listed(anonymous_id="anon-1", user_id="u1"))[0] == [("signup", "u1", "anon-1")]
    assert (await listed(anonymous_id="anon-1", to=(base + timedelta(hours=1)).isoformat()))[0] == [
        ("view", None, "anon-1")]
    assert (await listed(anonymous_id="nobody"))[0] == []
    first, cursor = await listed(anonymous_id="anon-1", limit="2")
    rest, end = await listed(anonymous_id="anon-1", limit="2", cursor=cursor)
    assert first + rest == (await listed(anonymous_id="anon-1"))[0] and end is None
    for bad in ({"anonymous_id": "a\x00b"}, {"user_id": "a\x00b"}):
        resp = await client.get("/v1/events", headers=bearer(key), params=bad)
        assert resp.status == 400
        error = (await resp.json())["error"]
        assert error["code"] == "invalid_request" and error["fields"][0]["field"] == next(iter(bad))


@pytest.mark.parametrize(("name", "says"), [
    ("", "blank"), ("   ", "blank"), ("\t\n", "blank"),
    (" signup", "whitespace"), ("signup ", "whitespace"), ("\tsignup\n", "whitespace"),
    ("signup\n", "whitespace"),  # `$` matches before a final newline: this one was stored as sent
])
async def test_event_names_are_not_trimmed_and_a_blank_one_is_said_to_be(client, make_key, database_url, name, says):
    """Names are kept as sent (docs/decisions.md): one with whitespace at either end is refused, not trimmed
    into another name, and a blank one is the spec's 400 saying so, where both got msgspec's regex message."""
    key = await make_key("read,write")
    resp = await client.post("/v1/events", headers=bearer(key), json={"event": name, "user_id": "u"})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request" and error["fields"][0]["field"] == "event"
    assert says in error["message"] and says in error["fields"][0]["message"]
    batch = await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": name, "user_id": "u"}, {"event": "signup", "user_id": "u"}]})
    body = await batch.json()
    assert (body["received"], body["failed"]) == (1, 1)
    assert body["errors"][0]["code"] == "invalid_request" and says in body["errors"][0]["message"]
    assert [e["event"] for e in (await (await client.get("/v1/events", headers=bearer(key))).json())["data"]] == [
        "signup"]


async def test_segment_names_are_snake_cased_and_a_blank_one_is_segments_400(client, make_key):
    """Segment's names are free-form and become snake_case as its warehouses name them, which drops the
    whitespace around them; a blank one is refused in Segment's shape and stores nothing."""
    from tests.test_segment_api import basic, create_source

    key = await make_key("read,write,admin")
    write_key = (await create_source(client, key))["write_key"]
    resp = await client.post("/v1/track", headers=basic(write_key), json={"event": "   ", "userId": "u"})
    assert resp.status == 400
    assert await resp.json() == {"code": "invalid_request", "message": "event: the event name is blank"}
    resp = await client.post("/v1/track", headers=basic(write_key), json={"event": " Order Completed ", "userId": "u"})
    assert resp.status == 200
    listed = (await (await client.get("/v1/events", headers=bearer(key))).json())["data"]
    assert [e["event"] for e in listed] == ["order_completed"]
