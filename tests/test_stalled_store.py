"""A stalled PostgreSQL (fault walk-through, docs/benchmarks.md "Faults under load"): one that neither fails nor
answers, as a table locked by another session or a server process stopped. Ingestion answers 503 with
Retry-After once its commit cannot happen within TALLY_COMMIT_TIMEOUT_SECONDS (requests waited, then answered 500
`store_failed` at asyncpg's 60 s command timeout); nothing answered 2xx is missing once the lock goes, and what was
answered 503 was not stored (its statement was cancelled), so a client's retry stores it once."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime

import asyncpg
import pytest

from actors.base import StoreFailed, StoreUnreachable
from actors.workspace import EVENTS, PartitionCache, WorkspaceActor
from app.views import users
from storage import statement_timeout
from storage.db import init_connection
from storage.events import EventRow
from storage.ids import new_id
from storage.workspaces import ensure_workspace
from tests.conftest import bearer, connect
from tests.reports_support import create_report, set_plan
from tests.site_helpers import post_event, stored_events
from tests.test_dependency_outages import HoldingRelay, _through_relay
from tests.test_segment_api import basic, create_source

BOUND = 1.0  # seconds: the tests' commit bound (TALLY_COMMIT_TIMEOUT_SECONDS), small so they run quickly
GUARD = 30  # seconds a request may take here before the test calls it hung (the old code's wait was 60 s)


async def _lock_events(database_url: str) -> asyncpg.Connection:
    """Another session holds every write to the events table back, until its transaction ends."""
    conn = await asyncpg.connect(database_url)
    await conn.execute("BEGIN")
    await conn.execute("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
    return conn


async def _served_again(send, served: int = 200) -> None:
    """Send until the answer is `served`, each earlier one a 503 (PostgreSQL answers again: what it held is cleaned
    up or answered first)."""
    for _ in range(50):
        resp = await send()
        if resp.status == served:
            return
        assert resp.status == 503, await resp.text()
        await asyncio.sleep(0.2)
    raise AssertionError("never served again")


async def _keyed_rows(database_url: str, workspace: str) -> list[tuple[str, str]]:
    conn = await connect(database_url)
    try:
        rows = await conn.fetch("SELECT e.name, coalesce(e.user_id, e.anonymous_id) AS who FROM events e "
                                "JOIN workspaces w ON w.id = e.workspace_id WHERE w.name = $1 AND e.site_id IS NULL",
                                workspace)
    finally:
        await conn.close()
    return sorted((r["name"], r["who"]) for r in rows)


async def test_ingestion_on_a_locked_events_table_answers_503_in_bounded_time_and_loses_nothing_acknowledged(
        make_client, settings, make_key, workspace, database_url):
    client = await make_client(dataclasses.replace(settings, commit_timeout_seconds=BOUND, flushes_in_flight=1))
    key = await make_key("read,write,admin")
    write_key = (await create_source(client, key))["write_key"]
    site = f"stalled-{uuid.uuid4().hex[:8]}"  # development: an unknown site id registers itself
    # Before the lock: each path stored once (its key, write key and site known, this month's partition made).
    before = {"event": "e", "user_id": "before"}
    assert (await client.post("/v1/events", headers=bearer(key), json=before)).status == 200
    track = {"userId": "seg-before", "event": "seg", "messageId": str(uuid.uuid4())}
    assert (await client.post("/v1/track", headers=basic(write_key), json=track)).status == 200
    assert (await post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/before"})).status == 202

    lock = await _lock_events(database_url)
    retried_track = {"userId": "seg-during", "event": "seg", "messageId": str(uuid.uuid4())}
    try:
        answers = await asyncio.wait_for(asyncio.gather(
            client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "during"}),
            client.post("/v1/events", headers={**bearer(key), "Idempotency-Key": "stalled-1"},
                        json={"event": "e", "user_id": "during-retried"}),
            client.post("/v1/events/batch", headers=bearer(key),
                        json={"events": [{"event": "e", "user_id": f"during-batch-{i}"} for i in range(3)]}),
            client.post("/v1/track", headers=basic(write_key), json=retried_track),
            post_event(client, {"s": site, "n": "pageview", "u": "https://x.example/during"}),
        ), GUARD)
        for resp in answers:
            assert resp.status == 503, (resp.url.path, resp.status, await resp.text())
            assert resp.headers["Retry-After"] == "5", resp.url.path
        for resp in answers[:3]:
            assert (await resp.json())["error"]["code"] == "unavailable"
        assert await answers[4].json() == {"error": "service unavailable"}
        ready = await client.get("/readyz")  # PostgreSQL answers SELECT 1, but ingestion cannot commit
        assert ready.status == 503 and ready.headers["Retry-After"] == "5"
        assert await ready.json() == {"status": "unavailable", "database": "StoreStalled"}
    finally:
        await lock.execute("ROLLBACK")
        await lock.close()

    # The lock gone: the retries (Idempotency-Key, Segment's messageId) and new events are stored, once each.
    resp = await client.post("/v1/events", headers={**bearer(key), "Idempotency-Key": "stalled-1"},
                             json={"event": "e", "user_id": "during-retried"})
    assert resp.status == 200, await resp.text()
    assert (await client.get("/readyz")).status == 200
    assert (await client.post("/v1/track", headers=basic(write_key), json=retried_track)).status == 200
    assert (await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "after"})).status == 200
    assert await _keyed_rows(database_url, workspace) == [
        ("e", "after"), ("e", "before"), ("e", "during-retried"), ("seg", "seg-before"), ("seg", "seg-during")]
    assert [e["url"] for e in await stored_events(database_url, site)] == ["https://x.example/before"]


async def test_a_flush_past_the_command_timeout_is_an_outage_not_a_store_failure(client, database_url, workspace):
    """asyncpg's command timeout (a statement that got no answer in time) says PostgreSQL is stalled, not that it
    refused the batch: StoreUnreachable (503 with Retry-After), where it was StoreFailed (500 store_failed)."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, init=init_connection, command_timeout=0.5)
    conn = await connect(database_url)
    try:
        workspace_id = await ensure_workspace(conn, workspace)
    finally:
        await conn.close()
    partitions = PartitionCache()
    actor = WorkspaceActor(("ws", workspace_id, "live"), pool, partitions, max_batch=10, capacity=100, linger=0,
                           commit_timeout=GUARD)  # the actor's own bound is far: the command timeout comes first
    actor.start()
    now = datetime.now(UTC)
    try:
        row = EventRow(new_id("evt"), workspace_id, "live", "e", now, now, user_id="u")
        await asyncio.wait_for(actor.submit(EVENTS, [row]), GUARD)  # the partition made before the lock
        lock = await _lock_events(database_url)
        try:
            stalled = actor.submit(EVENTS, [row._replace(id=new_id("evt"))])
            with pytest.raises(StoreFailed) as info:
                await asyncio.wait_for(stalled, GUARD)
            assert isinstance(info.value, StoreUnreachable)
        finally:
            await lock.execute("ROLLBACK")
            await lock.close()
        await asyncio.wait_for(actor.submit(EVENTS, [row._replace(id=new_id("evt"))]), GUARD)
    finally:
        await asyncio.wait_for(actor.stop(), GUARD)
        await pool.close()


async def test_ingestion_to_a_postgresql_that_stopped_answering_answers_503_and_keeps_what_it_acknowledged(
        make_client, settings, make_key, workspace, database_url):
    """Nothing comes back from PostgreSQL (a relay holding every byte, as a server process stopped does; its
    cancel requests get no answer either): every request is answered 503 with Retry-After, those whose flush was
    in flight after the cancellation's grace, those queued behind it at their own bound, where all waited for
    asyncpg's 60 s. Once it answers again, what was acknowledged is stored and ingestion commits again; what was
    refused may or may not be (its statement had gone out: decisions.md), never twice."""
    key = bearer(await make_key("read,write"))
    relay, client = await _through_relay(make_client, settings, database_url, key_cache_seconds=3600,
                                         commit_timeout_seconds=BOUND, flushes_in_flight=1)
    try:
        assert (await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "before"})).status == 200
        relay.stall()
        answers = await asyncio.wait_for(asyncio.gather(*[
            client.post("/v1/events", headers=key, json={"event": "e", "user_id": f"during-{i}"}) for i in range(5)]),
            GUARD)
        for resp in answers:
            assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
            assert (await resp.json())["error"]["code"] == "unavailable"
        relay.resume()
        # The stalled flush's connection is cleaned up first; meanwhile its slot is held.
        await _served_again(lambda: client.post("/v1/events", headers=key, json={"event": "e", "user_id": "after"}))
    finally:
        await relay.cut()
    stored = [who for _, who in await _keyed_rows(database_url, workspace)]
    assert {"before", "after"} <= set(stored) and len(stored) == len(set(stored)), stored
    assert set(stored) <= {"before", "after", *(f"during-{i}" for i in range(5))}, stored


async def test_requests_that_read_postgresql_while_it_stalls_answer_503_within_their_bound(
        make_client, settings, make_key, workspace, database_url):
    """Reads on a request's way (an API key's lookup, the event list, the lookup of a site's first event) waited
    for asyncpg's 60 s command timeout, then answered 500, and the requests queued behind them for a connection
    waited with no bound at all (fault walk-through with PostgreSQL SIGSTOPped; the key cache hid it above). Each
    now answers 503 with Retry-After within TALLY_DB_REQUEST_TIMEOUT_SECONDS, and once PostgreSQL answers again
    the same requests are served."""
    key = bearer(await make_key("read,write"))
    relay, client = await _through_relay(make_client, settings, database_url, key_cache_seconds=0, pool_max=2,
                                         commit_timeout_seconds=BOUND, db_request_timeout_seconds=BOUND)
    try:
        assert (await client.get("/v1/events?limit=1", headers=key)).status == 200
        relay.stall()
        answers = await asyncio.wait_for(asyncio.gather(
            *[client.get("/v1/events?limit=1", headers=key) for _ in range(4)],  # more than the pool holds
            client.post("/v1/events", headers=key, json={"event": "e", "user_id": "during"}),
            post_event(client, {"s": f"stall-{workspace}", "n": "pageview"})),  # an unknown site: looked up
            GUARD)
        for resp in answers[:5]:
            assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
            assert (await resp.json())["error"]["code"] == "unavailable"
        assert answers[5].status == 503 and answers[5].headers["Retry-After"] == "5", await answers[5].text()
        assert await answers[5].json() == {"error": "service unavailable"}
        relay.resume()
        await _served_again(lambda: client.get("/v1/events?limit=1", headers=key))
    finally:
        await relay.cut()


async def test_an_erasure_while_postgresql_stalls_answers_503_at_its_own_bound(
        make_client, settings, make_key, database_url, monkeypatch):
    """An erasure may take longer than other requests (every event of a user), so it has a bound of its own
    (app.views.users.ERASURE_SECONDS, here shortened), and a stalled PostgreSQL meets it with a 503 too, not
    asyncpg's command timeout and a 500; the retry erases once PostgreSQL answers."""
    monkeypatch.setattr(users, "ERASURE_SECONDS", BOUND)
    key = bearer(await make_key("read,write,admin"))
    relay, client = await _through_relay(make_client, settings, database_url, key_cache_seconds=3600,
                                         db_request_timeout_seconds=BOUND)
    try:
        assert (await client.post("/v1/events", headers=key, json={"event": "e", "user_id": "gone"})).status == 200
        relay.stall()
        resp = await asyncio.wait_for(client.delete("/v1/users/gone", headers=key), GUARD)
        assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
        relay.resume()
        await _served_again(lambda: client.delete("/v1/users/gone", headers=key), 204)
        listed = await client.get("/v1/events?user_id=gone", headers=key)
        assert listed.status == 200 and (await listed.json())["data"] == []
    finally:
        await relay.cut()


async def _report_run_stalled_at(client, relay: HoldingRelay, report_id: str, key: dict, marker: bytes) -> dict:
    """Run the report with its connection stalled at the first statement holding `marker`: a 503 with Retry-After,
    not a timeout. Then run it again with nothing held, and return that run's result."""
    def run():
        return client.get(f"/v1/reports/{report_id}/run", headers=key)
    relay.holding = marker
    resp = await asyncio.wait_for(run(), GUARD)
    assert resp.status == 503 and resp.headers["Retry-After"] == "5", await resp.text()
    assert (await resp.json())["error"]["code"] == "unavailable"
    assert relay.held == 1
    relay.holding = b""
    resp = await run()
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_a_custom_sql_report_while_postgresql_stalls_answers_503_not_a_timeout(
        make_client, settings, make_key, workspace, database_url, monkeypatch):
    """A custom SQL run's bound is PostgreSQL's own statement_timeout, which a stalled server cannot apply: the run
    waited for asyncpg's 60 s command timeout and answered 504 report_timeout, as if the SQL were too slow. A
    statement PostgreSQL has not ended a grace after its timeout (storage.statement_timeout.STALL_GRACE_SECONDS, here
    shortened) is an outage: 503 with Retry-After, and the same run is served once PostgreSQL answers. The relay
    stalls the run's connection at the customer's SQL, after the run's own lookups."""
    monkeypatch.setattr(statement_timeout, "STALL_GRACE_SECONDS", BOUND)
    raw_key = await make_key("read,write")
    await set_plan(database_url, workspace, "enterprise")
    relay, client = await _through_relay(make_client, settings, database_url, relay_class=HoldingRelay,
                                         key_cache_seconds=3600, custom_sql_timeout_seconds=BOUND)
    try:
        sql = "SELECT count(*) AS stalls_here FROM events"
        report = await create_report(client, raw_key, {"name": "SQL", "type": "custom", "config": {"sql": sql}})
        assert (await client.get(f"/v1/reports/{report['id']}/run", headers=bearer(raw_key))).status == 200
        result = await _report_run_stalled_at(client, relay, report["id"], bearer(raw_key), b"stalls_here")
        assert result["rows"] == [[0]]
    finally:
        await relay.cut()


async def test_a_report_grouped_by_a_trait_while_postgresql_stalls_answers_503_not_a_timeout(
        make_client, settings, make_key, database_url, monkeypatch):
    """A built-in report grouped by a user trait reads the trait's users from PostgreSQL inside the run's timeout:
    stalled there, the run answered 504 report_timeout at that timeout, and a scheduled delivery failed for good.
    The statement now carries PostgreSQL's own timeout, set to end a grace before the run's (the grace:
    storage.statement_timeout.STALL_GRACE_SECONDS, here shortened), and one not ended a grace after it is an
    outage: 503 with Retry-After."""
    monkeypatch.setattr(statement_timeout, "STALL_GRACE_SECONDS", BOUND)
    key = bearer(await make_key("read,write"))
    relay, client = await _through_relay(make_client, settings, database_url, relay_class=HoldingRelay,
                                         key_cache_seconds=3600, report_timeout_seconds=5 * BOUND)
    try:
        assert (await client.post("/v1/identify", headers=key,
                                  json={"user_id": "u1", "traits": {"plan": "pro"}})).status == 200
        assert (await client.post("/v1/events", headers=key, json={"event": "signup", "user_id": "u1"})).status == 200
        resp = await client.post("/v1/reports", headers=key, json={
            "name": "By plan", "type": "event_volume", "config": {"events": ["signup"], "group_by": "traits.plan"}})
        assert resp.status == 201, await resp.text()
        # The run's connection stalls at the trait's users (its first run: the statement's text goes out).
        result = await _report_run_stalled_at(client, relay, (await resp.json())["id"], key, b"traits #>> $3")
        assert [row[2:] for row in result["rows"] if row[3]] == [["pro", 1]]
    finally:
        await relay.cut()
