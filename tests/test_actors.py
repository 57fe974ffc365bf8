"""Group commit, crash recovery, backpressure, store failures, idle reaping and draining."""

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime

import asyncpg
import pytest

from actors.base import Actor, Message, Overloaded, StoreFailed, StoreUnreachable
from actors.supervisor import Supervisor
from actors.workspace import EVENTS, OP_EVENT, OP_TRAITS, SEGMENT, PartitionCache, WorkspaceActor
from app.appkeys import METRICS, POOL, SUPERVISOR, WRITE_POOL
from storage import events as event_store
from storage.events import EventRow, erasure_lock_key
from storage.ids import new_id
from tests.conftest import bearer, connect


async def _workspace_id(database_url, workspace):
    conn = await connect(database_url)
    try:
        return await conn.fetchval("SELECT id FROM workspaces WHERE name = $1", workspace)
    finally:
        await conn.close()


async def _stored_ids(database_url, workspace_id):
    conn = await connect(database_url)
    try:
        return {r["id"] for r in await conn.fetch("SELECT id FROM events WHERE workspace_id = $1", workspace_id)}
    finally:
        await conn.close()


async def _send(client, key, i):
    return await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": f"u{i}"})


async def test_crash_mid_batch_loses_no_acknowledged_event(client, make_key, monkeypatch, database_url, workspace):
    key = await make_key("write")
    original = WorkspaceActor.flush
    crashes = []

    async def flaky(self, batch):
        if not crashes:
            crashes.append(len(batch))
            raise RuntimeError("bug in the middle of a batch")
        await original(self, batch)

    monkeypatch.setattr(WorkspaceActor, "flush", flaky)
    restarts = client.app[METRICS].actor_restarts.labels("workspace")
    before = restarts._value.get()
    responses = await asyncio.gather(*[_send(client, key, i) for i in range(40)])
    statuses = [r.status for r in responses]
    acked = {(await r.json())["id"] for r in responses if r.status == 200}
    assert statuses.count(500) == crashes[0]  # exactly the crashed batch failed, and said so
    assert all(s in (200, 500) for s in statuses) and acked
    assert acked <= await _stored_ids(database_url, await _workspace_id(database_url, workspace))
    assert restarts._value.get() == before + 1
    assert (await _send(client, key, 99)).status == 200  # the restarted actor serves on


async def test_flushes_overlap_up_to_the_in_flight_bound(make_client, settings, make_key, monkeypatch,
                                                      database_url, workspace):
    client = await make_client(dataclasses.replace(settings, flushes_in_flight=2, batch_linger_ms=0))
    key = await make_key("write")
    original = WorkspaceActor.flush
    gate = asyncio.Event()
    running, peak = [0], [0]

    async def gated(self, batch):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        try:
            await gate.wait()
            await original(self, batch)
        finally:
            running[0] -= 1

    monkeypatch.setattr(WorkspaceActor, "flush", gated)
    tasks = [asyncio.create_task(_send(client, key, i)) for i in range(30)]
    for _ in range(100):
        if peak[0] == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # room for a third flush to start, if the bound let it
    assert peak[0] == 2 and not any(t.done() for t in tasks)  # nothing is acknowledged before its commit
    gate.set()
    responses = await asyncio.gather(*tasks)
    assert [r.status for r in responses] == [200] * 30
    acked = {(await r.json())["id"] for r in responses}
    assert acked == await _stored_ids(database_url, await _workspace_id(database_url, workspace))
    assert peak[0] == 2


async def test_store_failure_fails_the_batch_with_500_and_stores_nothing(client, make_key, database_url, workspace):
    key = await make_key("read,write")
    await _send(client, key, 0)
    workspace_id = await _workspace_id(database_url, workspace)
    conn = await connect(database_url)
    constraint = f"poison_{workspace_id}"
    try:
        await conn.execute(f"ALTER TABLE events ADD CONSTRAINT {constraint} "
                           f"CHECK (NOT (workspace_id = {int(workspace_id)} AND name = 'poison')) NOT VALID")
        resp = await client.post("/v1/events", headers=bearer(key), json={"event": "poison", "user_id": "u"})
        assert resp.status == 500
        assert (await resp.json())["error"]["code"] == "store_failed"
    finally:
        await conn.execute(f"ALTER TABLE events DROP CONSTRAINT {constraint}")
        await conn.close()
    names = [e["event"] for e in (await (await client.get("/v1/events", headers=bearer(key))).json())["data"]]
    assert names == ["e"]
    assert (await _send(client, key, 1)).status == 200


async def test_full_mailbox_answers_503_and_memory_stays_bounded(make_client, settings, make_key, database_url,
                                                                 workspace):
    client = await make_client(dataclasses.replace(settings, mailbox_events=5, batch_linger_ms=0))
    key = await make_key("write")
    assert (await _send(client, key, 0)).status == 200
    workspace_id = await _workspace_id(database_url, workspace)
    blocker = await connect(database_url)
    # Hold the erasure lock: flushes of this workspace wait, so the mailbox fills up.
    await blocker.execute("SELECT pg_advisory_lock($1, $2)", *erasure_lock_key(workspace_id, "live"))
    try:
        tasks = [asyncio.create_task(_send(client, key, i)) for i in range(1, 30)]
        await asyncio.sleep(0.5)
        actor = client.app[SUPERVISOR].actors[("ws", workspace_id, "live")]
        assert actor.pending <= 5
    finally:
        await blocker.execute("SELECT pg_advisory_unlock($1, $2)", *erasure_lock_key(workspace_id, "live"))
        await blocker.close()
    responses = await asyncio.gather(*tasks)
    rejected = [r for r in responses if r.status == 503]
    acked = {(await r.json())["id"] for r in responses if r.status == 200}
    assert rejected and len(acked) >= 5
    assert rejected[0].headers["Retry-After"] == "1"
    assert (await rejected[0].json())["error"]["code"] == "overloaded"
    assert acked <= await _stored_ids(database_url, workspace_id)


async def test_idle_actors_are_stopped_and_come_back(make_client, settings, make_key, database_url, workspace):
    client = await make_client(dataclasses.replace(settings, actor_idle_seconds=0.2))
    key = await make_key("write")
    assert (await _send(client, key, 0)).status == 200
    workspace_id = await _workspace_id(database_url, workspace)
    assert ("ws", workspace_id, "live") in client.app[SUPERVISOR].actors
    await asyncio.sleep(0.6)
    assert ("ws", workspace_id, "live") not in client.app[SUPERVISOR].actors
    assert (await _send(client, key, 1)).status == 200


async def test_close_drains_every_mailbox_before_returning(pool, client, make_key, database_url, workspace):
    await make_key("write")
    workspace_id = await _workspace_id(database_url, workspace)
    supervisor = Supervisor(lambda k: WorkspaceActor(k, pool, PartitionCache(), max_batch=3, capacity=100,
                                                     linger=0), idle_seconds=60)
    supervisor.start()
    actor = supervisor.actor(("ws", workspace_id, "live"))
    now = datetime.now(UTC)
    records = [EventRow(new_id("evt"), workspace_id, "live", "drained", now, now, anonymous_id="anon", properties={})
               for _ in range(10)]
    futures = [actor.submit(EVENTS, [r]) for r in records]
    await supervisor.stop()
    assert all(f.done() and f.exception() is None for f in futures)
    assert {r.id for r in records} <= await _stored_ids(database_url, workspace_id)
    with pytest.raises(Overloaded):
        supervisor.actor(("ws", workspace_id, "test"))


async def test_one_flush_stores_keyed_and_segment_events_with_traits_together(pool, client, make_key, database_url,
                                                                              workspace):
    # Keyed rows and Segment rows once had different widths, and a flush holding both with traits (so
    # one COPY of both) failed. Every writer now builds the one EventRow.
    await make_key("write")
    workspace_id = await _workspace_id(database_url, workspace)
    actor = WorkspaceActor(("ws", workspace_id, "live"), pool, PartitionCache(), max_batch=100, capacity=100,
                           linger=0)
    now = datetime.now(UTC)
    keyed = EventRow(new_id("evt"), workspace_id, "live", "keyed", now, now, user_id="u1", properties={})
    segment = EventRow(new_id("evt"), workspace_id, "live", "segment", now, now, user_id="u1", properties={})
    loop = asyncio.get_running_loop()
    calls = [("src_none", None, OP_EVENT, segment), ("src_none", None, OP_TRAITS, ("u1", {"plan": "pro"}, now, now))]
    await actor.flush([Message(EVENTS, [keyed], loop.create_future()), Message(SEGMENT, calls, loop.create_future())])
    assert {keyed.id, segment.id} <= await _stored_ids(database_url, workspace_id)


class _GatedActor(Actor):
    """Records batch sizes; each flush waits for the gate, as a flush waits for PostgreSQL."""

    def __init__(self, split: bool) -> None:
        super().__init__("gated", max_batch=5000, capacity=10_000, linger=0, max_inflight=3)
        self.split_batches = split
        self.gate = asyncio.Event()
        self.sizes: list[int] = []

    async def flush(self, batch):
        self.sizes.append(sum(m.size for m in batch))
        await self.gate.wait()


@pytest.mark.parametrize(("split", "requests", "events_each", "first_wave"), [
    (True, 64, 1, [16, 16, 16]),  # 16 requests stay back for the first free slot
    (False, 64, 1, [64]),
    (True, 10, 500, [5000]),  # few large requests are not split
])
async def test_a_wave_of_waiting_requests_is_split_over_one_batch_more_than_the_flush_slots(
        split, requests, events_each, first_wave):
    actor = _GatedActor(split)
    futures = [actor.submit("e", [i] * events_each) for i in range(requests)]
    actor.start()
    for _ in range(50):
        await asyncio.sleep(0)
    total = requests * events_each
    assert actor.sizes == first_wave and actor.pending == total - sum(first_wave)
    actor.gate.set()
    await asyncio.wait_for(actor.stop(), 5)
    assert sum(actor.sizes) == total and all(f.done() and f.exception() is None for f in futures)


async def test_a_submitter_cancelled_while_waiting_leaves_its_event_to_be_flushed_and_the_actor_serving():
    """Handlers await the actor's future directly (no shield): a cancelled request cancels its future, and the
    flush still takes the event and goes on with the others."""
    actor = _GatedActor(False)
    waiting = asyncio.ensure_future(actor.submit("e", ["cancelled"]))
    other = actor.submit("e", ["kept"])
    actor.start()
    await asyncio.sleep(0)
    waiting.cancel()
    actor.gate.set()
    await asyncio.wait_for(actor.stop(), 5)
    assert actor.sizes == [2] and waiting.cancelled()
    assert other.done() and other.exception() is None


async def test_writers_cache_the_trigger_plans_on_their_own_pool_and_readers_replan(client, make_key,
                                                                                 database_url, workspace):
    """The actors write through a pool of their own whose connections cache the events triggers' plans
    (plan_cache_mode auto, set when each connection opens, so nothing runs per acquire and nothing is reset
    on release); the main pool plans every read for its values (force_custom_plan)."""
    key = await make_key("write")
    assert (await _send(client, key, 1)).status == 200
    write_pool, read_pool = client.app[WRITE_POOL], client.app[POOL]
    assert write_pool is not read_pool
    actors = list(client.app[SUPERVISOR].actors.values())
    assert actors and all(actor.pool is write_pool for actor in actors)
    workspace_id = await _workspace_id(database_url, workspace)
    actor = WorkspaceActor(("ws", workspace_id, "live"), write_pool, PartitionCache(), max_batch=100, capacity=100,
                           linger=0)
    loop = asyncio.get_running_loop()
    now = datetime.now(UTC)
    keyed = EventRow(new_id("evt"), workspace_id, "live", "keyed", now, now, user_id="u1", properties={})
    await actor.flush([Message(EVENTS, [keyed], loop.create_future())])
    assert keyed.id in await _stored_ids(database_url, workspace_id)
    async with actor.connection() as conn:  # the connection the flush kept
        assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
    await actor._return_connections()
    held = [await write_pool.acquire() for _ in range(write_pool.get_size())]  # released ones included
    try:
        for conn in held:
            assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
    finally:
        for conn in held:
            await write_pool.release(conn)
    for _ in range(read_pool.get_size()):
        async with read_pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"


async def test_keyed_batches_copy_only_their_columns_and_mixed_batches_keep_every_field(pool, client, make_key,
                                                                                      database_url, workspace):
    await make_key("write")
    workspace_id = await _workspace_id(database_url, workspace)
    now = datetime.now(UTC)
    keyed = [EventRow(new_id("evt"), workspace_id, "live", "k", now, now, user_id=f"u{i}", properties={"i": i})
             for i in range(3)]
    paged = EventRow(new_id("evt"), workspace_id, "live", "imported", now, now, anonymous_id="a",
                     properties={}, url="https://x.example/p?q=1", path="/p", referrer="https://r.example/",
                     country="DE", utm_source="news")
    await PartitionCache().ensure(pool, {now})
    async with pool.acquire() as conn:
        await event_store.copy_events(conn, keyed)  # narrow: the page and visit columns are left NULL
        await event_store.copy_events(conn, [keyed[0]._replace(id=new_id("evt")), paged])  # full width
        rows = {r["id"]: r for r in await conn.fetch(
            "SELECT * FROM events WHERE workspace_id = $1 AND name IN ('k', 'imported')", workspace_id)}
    assert len(rows) == 5
    for row in keyed:
        stored = rows[row.id]
        assert (stored["user_id"], stored["properties"], stored["url"], stored["browser"]) == (
            row.user_id, row.properties, None, None)
    stored = rows[paged.id]
    assert tuple(stored[f] for f in ("anonymous_id", "url", "path", "referrer", "country", "utm_source")) == (
        "a", "https://x.example/p?q=1", "/p", "https://r.example/", "DE", "news")


class _BreakingActor(Actor):
    """Flushes on a real writer connection, which `breaking` closes under the flush before it raises what
    asyncpg raised there under load (an ops walk-through terminating backends: 1 in ~30 flushes)."""

    def __init__(self, pool, breaking) -> None:
        super().__init__("breaking", max_batch=10, capacity=100, linger=0)
        self.pool = pool
        self.breaking = breaking

    async def flush(self, batch):
        async with self.connection() as conn:
            if batch[0].kind == "break":
                await self.breaking(conn)
                raise asyncpg.InternalClientError("cannot switch to state 21; another operation (2) is in progress")
            await conn.execute("SELECT 1")


async def _terminate_backend(database_url: str, conn) -> None:
    """PostgreSQL ends the connection's backend, and asyncpg sees its socket close."""
    pid = conn.get_server_pid()
    admin = await connect(database_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    for _ in range(200):
        if conn.is_closed():
            return
        with contextlib.suppress(Exception):
            await conn.execute("SELECT 1")
        await asyncio.sleep(0.01)
    raise AssertionError("the terminated connection never closed")


async def _let_go(conn) -> None:
    conn.terminate()  # asyncpg lets the connection go (and releases its pool holder) itself


@pytest.mark.parametrize("breaking", ["terminated", "let go"])
async def test_a_flush_whose_connection_broke_answers_503_and_the_actor_keeps_serving(pool, database_url, breaking):
    """A client error from asyncpg on a connection that closed under the flush is PostgreSQL going away: the
    batch answers 503 with Retry-After (StoreUnreachable), the release of the dead connection does not replace
    that error, and the actor serves the next batch instead of crashing (its batch answered 500)."""
    hook = (lambda conn: _terminate_backend(database_url, conn)) if breaking == "terminated" else _let_go
    actor = _BreakingActor(pool, hook)
    actor.start()
    try:
        broken = actor.submit("break", [1])
        with pytest.raises(StoreUnreachable):
            await asyncio.wait_for(broken, 10)
        await asyncio.wait_for(actor.submit("ok", [2]), 10)
        assert actor._crash is None
    finally:
        await asyncio.wait_for(actor.stop(), 10)


async def test_a_client_error_on_a_live_connection_is_a_store_failure_not_an_outage(pool):
    """The same client error with the connection alive is a bug of the flush, not an outage: not a 503."""
    async def keep(conn) -> None:
        assert not conn.is_closed()

    actor = _BreakingActor(pool, keep)
    actor.start()
    try:
        failed = actor.submit("break", [1])
        with pytest.raises(StoreFailed) as info:
            await asyncio.wait_for(failed, 10)
        assert not isinstance(info.value, StoreUnreachable)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(actor.stop(), 10)
    # Unsupervised here, the actor's task ended on the crash (a supervisor would restart it).
    assert isinstance(actor._task.exception(), asyncpg.InternalClientError)
