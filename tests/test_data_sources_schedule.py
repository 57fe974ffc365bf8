"""The scheduled data-source job starts due sources and does not wait for them: a long import (a big Stripe
backfill) holds one slot of the process's few, not the job, so the other sources keep their schedule; and one
workspace cannot take every slot. The job used to run the due sources together and come back only once all were
done, so one long import held every other source's next sync, in every workspace, for as long as it ran."""

from __future__ import annotations

import asyncio

from app.appkeys import SCHEDULER
from app.sources.runner import JOB, RUNNER, SourceRunner
from tests.conftest import bearer
from tests.fake_peers import FakeHubSpot
from tests.test_data_sources import create, park_other_sources, wait_idle, wait_status
from tests.test_data_sources_http import STRIPE_KEY, charge, contact, customer, named


async def make_due(pool, source_id: str, minutes: int = 1) -> None:
    await pool.execute("UPDATE data_sources SET next_sync_at = now() - make_interval(mins => $2) WHERE id = $1",
                       source_id, minutes)


async def wait_profile(client, key: str, user_id: str, tries: int = 400) -> None:
    """Poll GET /v1/users/{id} (bounded) until the profile exists."""
    for _ in range(tries):
        if (await client.get(f"/v1/users/{user_id}", headers=bearer(key))).status == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no profile {user_id}: the source did not sync")


async def next_tick(client, tries: int = 400) -> None:
    """Run the scheduled job's next round, once the previous round has let go of it (bounded)."""
    for _ in range(tries):
        if await client.app[SCHEDULER].run_now(JOB):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the scheduled job is still held by its previous round")


async def stripe_source(client, key: str, url: str) -> str:
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    return created["id"]


async def hubspot_source(client, key: str, fake: FakeHubSpot, url: str) -> str:
    created = await create(client, key, {"name": "crm", "type": "hubspot", "options": {"base_url": url},
                                         "credentials": {"access_token": fake.access_token}})
    assert (await wait_status(client, key, created["id"], "active", "error"))["status"] == "active"
    return created["id"]


async def hold_charges(fake) -> None:
    """The next sync of a Stripe source will wait at its charges (mid-import) until the gate is set."""
    fake.charges.append(charge(2, 1, 1_700_000_200))
    fake.charges_gate = asyncio.Event()
    fake.charges_asked.clear()


async def held_due_stripe_source(client, key: str, fake, url: str, pool) -> str:
    """A Stripe source, the only one the job may pick, due now, whose import will be held at its charges."""
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    slow = await stripe_source(client, key, url)
    await park_other_sources(pool, slow)
    await hold_charges(fake)
    await make_due(pool, slow)
    return slow


async def test_a_long_import_does_not_hold_the_next_ticks_sources(client, make_key, stripe, hubspot, pool):
    fake, url = stripe
    hub, hub_url = hubspot
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    key = await make_key("admin,read")
    slow = await stripe_source(client, key, url)
    other = await hubspot_source(client, key, hub, hub_url)
    await park_other_sources(pool, slow, other)

    await hold_charges(fake)
    await make_due(pool, slow)
    first_tick = asyncio.create_task(client.app[SCHEDULER].run_now(JOB))
    try:
        await asyncio.wait_for(fake.charges_asked.wait(), 30)  # the slow source is mid-import
        # By the next tick the other source is due: it syncs while the slow one is still importing.
        hub.contacts.append(contact(7, "2024-02-01T00:00:00Z"))
        await make_due(pool, other)
        await next_tick(client)
        await wait_profile(client, key, "107")
        assert (await wait_status(client, key, other, "active"))["last_synced_at"] is not None
        assert (await wait_status(client, key, slow, "syncing"))["status"] == "syncing"
    finally:
        fake.charges_gate.set()
        await asyncio.wait_for(first_tick, 60)
        await wait_idle(client)
    body = await wait_status(client, key, slow, "active", "error")
    assert body["status"] == "active", body
    assert sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")) == [
        "ch_1", "ch_2"]


async def test_a_slow_source_past_its_lease_is_not_started_again_beside_itself(client, make_key, stripe, pool):
    """A page slower than the lease: the next tick must not start a second run of the source in this process,
    which would read from the same cursor and import every charge twice."""
    fake, url = stripe
    key = await make_key("admin,read")
    slow = await held_due_stripe_source(client, key, fake, url, pool)
    first_tick = asyncio.create_task(client.app[SCHEDULER].run_now(JOB))
    try:
        await asyncio.wait_for(fake.charges_asked.wait(), 30)
        asked = fake.requests
        await pool.execute("UPDATE data_sources SET lease_until = now() - interval '1 second' WHERE id = $1", slow)
        await next_tick(client)
    finally:
        fake.charges_gate.set()
        await asyncio.wait_for(first_tick, 60)
        await wait_idle(client)
    assert (await wait_status(client, key, slow, "active", "error"))["status"] == "active"
    assert fake.requests == asked + 3  # the held charges page, then refunds and events: one run
    assert sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")) == [
        "ch_1", "ch_2"]


async def test_one_workspace_cannot_take_every_slot(client, make_key, stripe, hubspot, pool, monkeypatch):
    """Two slots: a workspace with two long imports due first gets one of them; the other workspace's due
    source takes the second and syncs while both long imports wait."""
    monkeypatch.setattr("app.sources.runner.CONCURRENCY", 2)
    fake, url = stripe
    hub, hub_url = hubspot
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    busy_key = await make_key("admin,read")
    other_key = await make_key("admin,read", workspace_name=f"other-{busy_key[-8:]}")
    long_ones = [await stripe_source(client, busy_key, url) for _ in range(2)]
    other = await hubspot_source(client, other_key, hub, hub_url)
    await park_other_sources(pool, *long_ones, other)

    await hold_charges(fake)
    hub.contacts.append(contact(8, "2024-02-01T00:00:00Z"))
    for source_id in long_ones:
        await make_due(pool, source_id, minutes=3)
    await make_due(pool, other, minutes=2)
    tick = asyncio.create_task(client.app[SCHEDULER].run_now(JOB))
    try:
        await wait_profile(client, other_key, "108")
    finally:
        fake.charges_gate.set()
        await asyncio.wait_for(tick, 60)
        await wait_idle(client)
    for source_id in long_ones:
        assert (await wait_status(client, busy_key, source_id, "active", "error"))["status"] == "active"
    # Each long import ran once: the one charge added since their first sync, once per source.
    assert sorted(e["properties"]["charge_id"] for e in await named(client, busy_key, "charge_succeeded")) == [
        "ch_1", "ch_1", "ch_2", "ch_2"]


async def test_a_live_run_keeps_its_lease_so_another_process_does_not_import_it_again(
        client, make_key, stripe, pool, monkeypatch):
    """A page outlasting the lease (a slow peer: here held between two pages): the run renews its lease while it
    lives, so another process's scheduled job does not claim the source and import the same
    charges a second time."""
    monkeypatch.setattr("app.sources.runner.HEARTBEAT_SECONDS", 0.05)
    fake, url = stripe
    key = await make_key("admin,read")
    slow = await held_due_stripe_source(client, key, fake, url, pool)
    await next_tick(client)
    mine = client.app[RUNNER]
    other_process = SourceRunner(mine.pool, mine.box, mine.timeout, mine.guard, mine.metrics)
    try:
        await asyncio.wait_for(fake.charges_asked.wait(), 30)
        # As if the lease's time had passed while the page is still read.
        await pool.execute("UPDATE data_sources SET lease_until = now() - interval '1 second' WHERE id = $1", slow)
        for _ in range(400):
            if await pool.fetchval("SELECT lease_until > now() FROM data_sources WHERE id = $1", slow):
                break
            await asyncio.sleep(0.05)
        await other_process.run_due()
    finally:
        fake.charges_gate.set()
        await wait_idle(client)
        for _ in range(400):  # a run the other process started ends too, before it is stopped
            if not other_process.running:
                break
            await asyncio.sleep(0.05)
        await other_process.stop()
    assert (await wait_status(client, key, slow, "active", "error"))["status"] == "active"
    assert sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")) == [
        "ch_1", "ch_2"]
