"""POST /v1/identify, GET /v1/users, GET/DELETE /v1/users/{id}."""

import asyncio
import base64
import contextlib
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from app.appkeys import MIRROR
from storage.events import erase_user, erasure_lock_key
from tests.conftest import bearer, connect
from tests.reports_support import create_report, run_report, workspace_id


async def test_identify_creates_then_merges_traits(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/identify", headers=bearer(key), json={
        "user_id": "ada", "traits": {"name": "Ada", "plan": "free"}, "timestamp": "2026-11-01T09:00:00Z"})
    assert resp.status == 200
    body = await resp.json()
    assert body["id"] == "ada" and body["status"] == "identified" and body["received_at"].endswith("Z")
    await client.post("/v1/identify", headers=bearer(key),
                      json={"user_id": "ada", "traits": {"plan": "pro", "seats": 5}})
    profile = await (await client.get("/v1/users/ada", headers=bearer(key))).json()
    assert profile["traits"] == {"name": "Ada", "plan": "pro", "seats": 5}
    assert profile["created_at"] == "2026-11-01T09:00:00.000Z"
    assert profile["event_count"] == 0 and profile["last_seen_at"] is None


async def test_events_keep_profile_counters(client, make_key):
    key = await make_key("read,write")
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "bo", "traits": {}})
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "a", "user_id": "bo", "timestamp": "2026-11-03T00:00:00Z"},
        {"event": "b", "user_id": "bo", "timestamp": "2026-11-05T00:00:00Z"},
        {"event": "c", "user_id": "bo", "timestamp": "2026-11-04T00:00:00Z"}]})
    await client.post("/v1/events", headers=bearer(key), json={"event": "d", "user_id": "bo",
                                                                "timestamp": "2026-11-02T00:00:00Z"})
    profile = await (await client.get("/v1/users/bo", headers=bearer(key))).json()
    assert profile["event_count"] == 4
    assert profile["last_seen_at"] == "2026-11-05T00:00:00.000Z"


async def test_back_dated_events_move_created_at_back_and_last_seen_forward(client, make_key):
    """A profile first seen through a back-dated event starts at the earliest event time, not at the
    time the first batch arrived; an even older event later moves it back again (migration 0012)."""
    key = await make_key("read,write")
    for ts in ("2026-11-10T00:00:00Z", "2026-10-01T12:00:00Z", "2026-11-12T00:00:00Z", "2026-10-05T00:00:00Z"):
        resp = await client.post("/v1/events", headers=bearer(key),
                                 json={"event": "a", "user_id": "cy", "timestamp": ts})
        assert resp.status == 200, await resp.text()
    profile = await (await client.get("/v1/users/cy", headers=bearer(key))).json()
    assert profile["event_count"] == 4
    assert profile["created_at"] == "2026-10-01T12:00:00.000Z"
    assert profile["last_seen_at"] == "2026-11-12T00:00:00.000Z"


async def test_a_back_dated_identify_moves_created_at_back(client, make_key):
    """created_at is the earliest of the identifies' and the events' timestamps, in any order of arrival."""
    key = await make_key("read,write")
    await client.post("/v1/events", headers=bearer(key),
                      json={"event": "zz", "user_id": "z1", "timestamp": "2026-11-20T10:00:00Z"})
    await client.post("/v1/identify", headers=bearer(key),
                      json={"user_id": "z1", "traits": {"a": 1}, "timestamp": "2026-11-10T10:00:00Z"})
    for first, second in (("2026-11-20T10:00:00Z", "2026-11-10T10:00:00Z"),  # one after the other
                          ("2026-11-10T10:00:00Z", "2026-11-20T10:00:00Z")):
        await client.post("/v1/identify", headers=bearer(key), json={"user_id": "z2", "timestamp": first})
        await client.post("/v1/identify", headers=bearer(key), json={"user_id": "z2", "timestamp": second})
    await asyncio.gather(*(client.post("/v1/identify", headers=bearer(key), json={"user_id": "z3", "timestamp": t})
                           for t in ("2026-11-20T10:00:00Z", "2026-11-10T10:00:00Z", "2026-11-15T10:00:00Z")))
    for user_id in ("z1", "z2", "z3"):
        profile = await (await client.get(f"/v1/users/{user_id}", headers=bearer(key))).json()
        assert profile["created_at"] == "2026-11-10T10:00:00.000Z", profile
    z1 = await (await client.get("/v1/users/z1", headers=bearer(key))).json()
    assert z1["last_seen_at"] == "2026-11-20T10:00:00.000Z" and z1["traits"] == {"a": 1}


async def test_identify_validation(client, make_key):
    key = await make_key("write")
    for body in ({}, {"user_id": ""}, {"user_id": "u", "traits": "x"}, {"user_id": 5}):
        resp = await client.post("/v1/identify", headers=bearer(key), json=body)
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == "invalid_request"


async def test_unknown_user_is_404(client, make_key):
    key = await make_key("read")
    resp = await client.get("/v1/users/nobody", headers=bearer(key))
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "not_found"


async def test_list_users_with_trait_filters_and_pagination(client, make_key):
    key = await make_key("read,write")
    for i in range(25):
        traits = {"plan": "pro" if i % 2 else "free", "company": "acme" if i % 3 == 0 else "globex", "n": i}
        await client.post("/v1/identify", headers=bearer(key), json={"user_id": f"user{i:02d}", "traits": traits})

    async def page(**params):
        resp = await client.get("/v1/users", headers=bearer(key), params=params)
        assert resp.status == 200
        return await resp.json()

    everyone = await page()
    assert len(everyone["data"]) == 25 and everyone["has_more"] is False
    pro = await page(**{"trait[plan]": "pro"})
    assert {u["id"] for u in pro["data"]} == {f"user{i:02d}" for i in range(25) if i % 2}
    both = await page(**{"trait[plan]": "pro", "trait[company]": "acme"})
    assert {u["id"] for u in both["data"]} == {f"user{i:02d}" for i in range(25) if i % 2 and i % 3 == 0}
    numeric = await page(**{"trait[n]": "7"})
    assert [u["id"] for u in numeric["data"]] == ["user07"]

    seen, cursor = [], None
    while True:
        body = await page(limit="10", **({"cursor": cursor} if cursor else {}))
        seen += [u["id"] for u in body["data"]]
        if not body["has_more"]:
            break
        cursor = body["next_cursor"]
    assert sorted(seen) == sorted(u["id"] for u in everyone["data"]) and len(set(seen)) == 25
    assert (await client.get("/v1/users", headers=bearer(key), params={"limit": "1001"})).status == 400
    assert (await client.get("/v1/users", headers=bearer(key), params={"cursor": "bm9wZQ"})).status == 400


async def test_delete_erases_profile_and_every_event(client, make_key, database_url):
    key = await make_key("read,write,admin")
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "gone", "traits": {"email": "g@x.io"}})
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "a", "user_id": "gone"}, {"event": "b", "user_id": "stays"}]})
    resp = await client.delete("/v1/users/gone", headers=bearer(key))
    assert resp.status == 204 and await resp.read() == b""
    assert (await client.get("/v1/users/gone", headers=bearer(key))).status == 404
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert [e["user_id"] for e in listed["data"]] == ["stays"]
    # Events after the erasure are a new life for that id.
    await client.post("/v1/events", headers=bearer(key), json={"event": "back", "user_id": "gone"})
    assert (await (await client.get("/v1/users/gone", headers=bearer(key))).json())["event_count"] == 1


async def test_erasure_racing_with_ingestion_leaves_nothing_received_before_it(client, make_key, database_url):
    """Events in flight while the erasure runs (still in a batch, or flushing) never survive it."""
    key = await make_key("read,write,admin")
    await client.post("/v1/events", headers=bearer(key), json={"event": "first", "user_id": "racer"})

    async def send(i):
        return await client.post("/v1/events", headers=bearer(key), json={"event": "tick", "user_id": "racer",
                                                                          "properties": {"i": i}})

    sends = [asyncio.create_task(send(i)) for i in range(60)]
    await asyncio.sleep(0)
    erase = await client.delete("/v1/users/racer", headers=bearer(key))
    assert erase.status == 204
    results = await asyncio.gather(*sends)
    assert all(r.status == 200 for r in results)
    conn = await asyncpg.connect(database_url)
    try:
        erased_at = await conn.fetchval("SELECT max(erased_at) FROM erasures WHERE user_id = 'racer'")
        survivors = await conn.fetch("SELECT received_at FROM events WHERE user_id = 'racer'")
    finally:
        await conn.close()
    assert all(r["received_at"] > erased_at for r in survivors)


@contextlib.asynccontextmanager
async def _erasure_under_way(database_url: str, workspace: str, user_id: str):
    """An erasure of `user_id` in the workspace's live env, under way: it holds the erasure lock and has written
    its tombstone, uncommitted. Yields (its connection, the workspace id, its transaction, for the test to
    commit)."""
    eraser = await connect(database_url)
    try:
        workspace_id = await eraser.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace)
        tx = eraser.transaction()
        await tx.start()
        await eraser.execute("SELECT pg_advisory_xact_lock($1, $2)", *erasure_lock_key(workspace_id, "live"))
        await eraser.execute("INSERT INTO erasures (workspace_id, env, user_id, erased_at) VALUES ($1, 'live', $2, "
                             "$3)", workspace_id, user_id, datetime.now(UTC) + timedelta(seconds=30))
        yield eraser, workspace_id, tx
    finally:
        await eraser.close()


@pytest.mark.parametrize("sent", [{"user_id": "late"}, {"anonymous_id": "late"}], ids=["user id", "anonymous id"])
async def test_a_flush_waiting_on_an_erasure_drops_the_ids_events_received_before_it(client, make_key, database_url,
                                                                                     workspace, sent):
    """The flush reads tombstones after it gets the erasure lock, not from a snapshot taken before. An event of
    the erased id received before the erasure and flushed after it is dropped, whether the id is
    its user id or, with no user id, its anonymous id (an anonymous id's events are erased too); an event of
    another user with that anonymous id is not."""
    key = await make_key("read,write,admin")
    await client.post("/v1/events", headers=bearer(key), json={"event": "first", "user_id": "other"})
    async with _erasure_under_way(database_url, workspace, "late") as (eraser, workspace_id, tx):
        sending = asyncio.create_task(client.post("/v1/events/batch", headers=bearer(key), json={"events": [
            {"event": "in_flight", **sent}, {"event": "kept", "user_id": "someone", "anonymous_id": "late"}]}))
        await asyncio.sleep(0.3)
        assert not sending.done()  # the flush waits for the erasure
        await tx.commit()
        assert (await sending).status == 200
        rows = await eraser.fetch("SELECT name, user_id, anonymous_id FROM events WHERE workspace_id = $1 "
                                  "AND name IN ('in_flight', 'kept')", workspace_id)
        assert [tuple(r) for r in rows] == [("kept", "someone", "late")]


async def test_erasing_an_anonymous_id_deletes_its_anonymous_events_everywhere(client, make_key):
    """A visitor known only by an anonymous id is a user to the reports (their actor): erasing that id removes
    the events sent with it and no user_id, from the event list and from every report."""
    key = await make_key("read,write,admin")
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "signup", "anonymous_id": "visitor-9", "timestamp": "2026-10-23T10:00:00Z"},
        {"event": "page_viewed", "anonymous_id": "visitor-9", "timestamp": "2026-10-23T11:00:00Z"},
        {"event": "signup", "user_id": "keeps", "anonymous_id": "visitor-9", "timestamp": "2026-10-23T12:00:00Z"}]})
    report = await (await client.post("/v1/reports", headers=bearer(key), json={
        "name": "v", "type": "event_volume", "config": {
            "events": ["signup", "page_viewed"], "from": "2026-10-23T00:00:00Z", "to": "2026-10-23T23:00:00Z"}})).json()

    async def counts() -> dict[str, int]:
        result = await (await client.get(f"/v1/reports/{report['id']}/run", headers=bearer(key))).json()
        return {row[1]: row[2] for row in result["rows"]}

    assert await counts() == {"signup": 2, "page_viewed": 1}
    assert (await client.delete("/v1/users/visitor-9", headers=bearer(key))).status == 204
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert [(e["event"], e["user_id"]) for e in listed["data"]] == [("signup", "keeps")]  # a user's event stays
    assert await counts() == {"signup": 1, "page_viewed": 0}


async def test_identify_with_an_anonymous_id_merges_its_events_into_the_user(client, make_key):
    """A client that tracked a visitor anonymously names the anonymous id when it identifies them (as PostHog's
    and Mixpanel's identify do): the anonymous events become the user's, in the event list, the profile and
    the reports, so a funnel from an anonymous first step to a signed-in last one counts one user."""
    from tests.reports_support import create_report, run_report

    key = await make_key("read,write,admin")
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "landing_viewed", "anonymous_id": "anon-7", "timestamp": "2026-10-23T10:00:00Z"},
        {"event": "signup", "anonymous_id": "anon-7", "timestamp": "2026-10-23T10:05:00Z"},
        {"event": "landing_viewed", "anonymous_id": "anon-8", "timestamp": "2026-10-23T10:06:00Z"}]})
    report = await create_report(client, key, {"name": "F", "type": "funnel", "config": {
        "events": ["landing_viewed", "signup", "purchase"], "from": "2026-10-23T00:00:00Z",
        "to": "2026-10-23T23:59:59Z"}})
    assert [row[2] for row in (await run_report(client, key, report["id"]))["rows"]] == [2, 1, 0]

    resp = await client.post("/v1/identify", headers=bearer(key), json={
        "user_id": "u-7", "anonymous_id": "anon-7", "traits": {"plan": "pro"}, "timestamp": "2026-10-23T10:07:00Z"})
    assert resp.status == 200 and (await resp.json())["id"] == "u-7"
    await client.post("/v1/events", headers=bearer(key), json={
        "event": "purchase", "user_id": "u-7", "timestamp": "2026-10-23T10:10:00Z"})

    listed = await (await client.get("/v1/events", headers=bearer(key), params={"user_id": "u-7"})).json()
    assert [e["event"] for e in listed["data"]] == ["purchase", "signup", "landing_viewed"]
    profile = await (await client.get("/v1/users/u-7", headers=bearer(key))).json()
    assert (profile["traits"], profile["event_count"], profile["created_at"]) == (
        {"plan": "pro"}, 3, "2026-10-23T10:00:00.000Z")
    assert [row[2] for row in (await run_report(client, key, report["id"]))["rows"]] == [2, 1, 1]
    # The other visitor stays anonymous; identifying a user with its own id as anonymous id changes nothing.
    anon = await (await client.get("/v1/events", headers=bearer(key), params={"user_id": "anon-8"})).json()
    assert anon["data"] == []
    resp = await client.post("/v1/identify", headers=bearer(key), json={"user_id": "u-7", "anonymous_id": "u-7"})
    assert resp.status == 200
    assert (await (await client.get("/v1/users/u-7", headers=bearer(key))).json())["event_count"] == 3


@pytest.mark.parametrize("anonymous_id,segment", [(None, False), ("anon-late", False), (None, True)],
                         ids=["traits", "traits and a merge", "segment identify"])
async def test_an_identify_waiting_on_an_erasure_does_not_bring_the_profile_back(client, make_key, database_url,
                                                                                 workspace, anonymous_id, segment):
    """An identify received before an erasure and flushed after it is dropped, as an event is: its traits (an
    email, say) would otherwise recreate the erased profile, and its merge would move events into it."""
    from tests.test_segment_api import basic, create_source

    key = await make_key("read,write,admin")
    write_key = (await create_source(client, key))["write_key"] if segment else None
    await client.post("/v1/events", headers=bearer(key), json={"event": "seen", "anonymous_id": "anon-late"})
    async with _erasure_under_way(database_url, workspace, "late") as (eraser, workspace_id, tx):
        body = {"user_id": "late", "traits": {"email": "late@example.com"}}
        if anonymous_id:
            body["anonymous_id"] = anonymous_id
        if segment:
            body = {"userId": "late", "traits": {"email": "late@example.com"}}
        sending = asyncio.create_task(client.post(
            "/v1/identify", headers=basic(write_key) if segment else bearer(key), json=body))
        await asyncio.sleep(0.3)
        await tx.commit()
        assert (await sending).status == 200
        await _still_erased(client, key, eraser, workspace_id)


async def _still_erased(client, key: str, eraser, workspace_id: int) -> None:
    """The erased user 'late' has no profile and no events: nothing waiting on the erasure brought it back."""
    assert (await client.get("/v1/users/late", headers=bearer(key))).status == 404
    moved = await eraser.fetchval("SELECT count(*) FROM events WHERE workspace_id = $1 AND user_id = 'late'",
                                  workspace_id)
    assert moved == 0


@pytest.mark.parametrize("previous", ["anonymous events", "a profile"])
async def test_an_alias_waiting_on_an_erasure_does_not_bring_the_profile_back(client, make_key, database_url,
                                                                              workspace, previous):
    """A Segment alias into an id being erased, received before the erasure and flushed after it, is dropped as
    an identify is: moving the previous id's events (or its profile's traits) into the erased id recreated
    its profile. The previous id keeps what it had."""
    from tests.test_segment_api import basic, create_source

    key = await make_key("read,write,admin")
    write_key = (await create_source(client, key))["write_key"]
    if previous == "a profile":
        await client.post("/v1/identify", headers=bearer(key), json={"user_id": "old", "traits": {"email": "o@x.io"}})
    else:
        await client.post("/v1/events", headers=bearer(key), json={"event": "seen", "anonymous_id": "old"})
    async with _erasure_under_way(database_url, workspace, "late") as (eraser, workspace_id, tx):
        sending = asyncio.create_task(client.post("/v1/alias", headers=basic(write_key),
                                                  json={"previousId": "old", "userId": "late"}))
        await asyncio.sleep(0.3)
        assert not sending.done()  # the flush waits for the erasure
        await tx.commit()
        assert (await sending).status == 200
        await _still_erased(client, key, eraser, workspace_id)
    if previous == "a profile":
        kept = await (await client.get("/v1/users/old", headers=bearer(key))).json()
        assert kept["traits"] == {"email": "o@x.io"}
    else:
        listed = (await (await client.get("/v1/events", headers=bearer(key))).json())["data"]
        assert [(e["event"], e["user_id"], e["anonymous_id"]) for e in listed] == [("seen", None, "old")]


@pytest.mark.parametrize("name", ["traits[plan]", "trait[plan", "trait[]", "trait", "Trait[plan]",
                                  "trait[" + "k" * 256 + "]"])
async def test_a_trait_filter_that_is_not_trait_key_is_400_not_ignored(client, make_key, name):
    """A mistyped trait filter was ignored, so the answer listed every user as if they all matched (a caller
    acting on "the pro users" acted on everyone): it is a 400 naming the parameter, and so is one trait given
    twice, whose filters cannot both hold (the last one won)."""
    key = await make_key("read,write")
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "ada", "traits": {"plan": "pro"}})
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "bo", "traits": {"plan": "free"}})
    resp = await client.get("/v1/users", headers=bearer(key), params={name: "pro"})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request" and error["fields"][0]["field"] == name[:300]
    twice = await client.get("/v1/users", headers=bearer(key), params=[("trait[plan]", "pro"), ("trait[plan]", "free")])
    assert twice.status == 400
    assert (await twice.json())["error"]["fields"][0]["field"] == "trait[plan]"


@pytest.mark.parametrize("tampered", ["[9223372036854775808]", "[true]", "[-1]"])
async def test_a_users_cursor_the_service_never_issues_is_400(client, make_key, tampered):
    """The users cursor is a position the service wrote: one past PostgreSQL's bigint was a 500 (the query
    failed), and `true` or a negative number was read as a position and answered a page."""
    key = await make_key("read,write")
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "ada", "traits": {}})
    cursor = base64.urlsafe_b64encode(tampered.encode()).decode().rstrip("=")
    resp = await client.get("/v1/users", headers=bearer(key), params={"cursor": cursor})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request" and error["fields"] == [{"field": "cursor", "message": "not valid"}]


async def test_events_sent_after_an_erasure_stay_in_the_reports(client, make_key, database_url, workspace):
    """Erasure is not a block list: the user's next events start again (the event list shows them). When an
    erasure and such an event reached the analytics store in one mirror round, the round wrote the event and
    then deleted every row of the user, so reports lost it for good while GET /v1/events listed it."""
    key = await make_key("read,write,admin")
    send = lambda: client.post("/v1/events", headers=bearer(key), json={  # noqa: E731
        "event": "buy", "user_id": "back", "timestamp": "2026-11-20T10:00:00Z"})
    assert (await send()).status == 200
    report = await create_report(client, key, {"name": "V", "type": "event_volume", "config": {
        "events": ["buy"], "from": "2026-11-20T00:00:00Z", "to": "2026-11-21T00:00:00Z"}})
    total = lambda result: sum(row[2] for row in result["rows"])  # noqa: E731
    assert total(await run_report(client, key, report["id"])) == 1
    async with client.app[MIRROR]._lock:  # no round until both the erasure and the new event are committed
        conn = await connect(database_url)
        try:
            await erase_user(conn, await workspace_id(database_url, workspace), "live", "back", datetime.now(UTC))
        finally:
            await conn.close()
        assert (await send()).status == 200
    listed = await (await client.get("/v1/events", headers=bearer(key), params={"user_id": "back"})).json()
    assert len(listed["data"]) == 1
    assert total(await run_report(client, key, report["id"])) == 1
