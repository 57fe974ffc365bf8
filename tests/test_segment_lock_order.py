"""Concurrent Segment flushes lock a source's row before any profile's, whichever path they take: a flush of
events alone (one statement, whose profile upkeep runs in the events trigger after its touch of the source)
and a flush with traits (a transaction) took them in opposite orders, and analytics.js's identify and track
for the same user, on a source's first calls, deadlocked (one answered 500, the SDK retried)."""

from __future__ import annotations

import asyncio

from tests.conftest import bearer, connect
from tests.test_segment_api import basic, create_source, mid


async def waiting_on_a_lock(conn, count: int) -> None:
    for _ in range(200):
        waiting = await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                      "AND wait_event_type = 'Lock'")
        if waiting >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"expected {count} backends waiting on a lock")


async def test_identify_and_track_of_one_user_flushed_at_once_both_commit(client, make_key, database_url):
    key = await make_key()
    assert (await client.post("/v1/identify", headers=bearer(key), json={"user_id": "u1"})).status == 200
    h = basic((await create_source(client, key))["write_key"])  # a new source: its first calls touch its row
    holder = await connect(database_url)
    try:
        tx = holder.transaction()
        await tx.start()
        # Hold the profile's row, so that each flush stops at its first profile lock.
        await holder.execute("SELECT 1 FROM user_profiles WHERE user_id = 'u1' FOR UPDATE")
        identify = asyncio.create_task(client.post("/v1/identify", headers=h, json={
            "userId": "u1", "traits": {"plan": "pro"}, "messageId": mid()}))
        await waiting_on_a_lock(holder, 1)
        track = asyncio.create_task(client.post("/v1/track", headers=h, json={
            "userId": "u1", "event": "Order Completed", "messageId": mid()}))
        await waiting_on_a_lock(holder, 2)
        await tx.commit()
        answers = await asyncio.gather(identify, track)
    finally:
        await holder.close()
    assert [a.status for a in answers] == [200, 200], [await a.text() for a in answers]
    profile = await (await client.get("/v1/users/u1", headers=bearer(key))).json()
    assert (profile["traits"], profile["event_count"]) == ({"plan": "pro"}, 1)
