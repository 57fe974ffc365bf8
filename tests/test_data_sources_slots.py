"""Runs started through the API take the scheduled job's slots: four runs at once in a process, at most three of
one workspace. A sync asked for with no slot free is a 429 that starts nothing; a source created then waits,
testing, for the job. They used to run beside the slots, so one workspace could start any number of syncs."""

from __future__ import annotations

import asyncio

from app.sources.runner import RUNNER
from tests.conftest import bearer
from tests.test_data_sources import run_job, wait_idle, wait_status
from tests.test_data_sources_http import STRIPE_KEY, charge, customer
from tests.test_data_sources_schedule import hold_charges, stripe_source
from tests.test_data_sources_stuck import run_due_job


async def sync_now(client, key: str, source_id: str):
    return await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))


async def test_syncs_asked_for_through_the_api_take_the_slots(client, make_key, stripe):
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    busy = await make_key("admin,read")
    second = await make_key("admin,read", workspace_name=f"second-{busy[-8:]}")
    third = await make_key("admin,read", workspace_name=f"third-{busy[-8:]}")
    busy_sources = [await stripe_source(client, busy, url) for _ in range(4)]
    second_source = await stripe_source(client, second, url)
    third_source = await stripe_source(client, third, url)

    await hold_charges(fake)  # every sync started now waits at its charges, holding its slot
    try:
        for source_id in busy_sources[:3]:
            assert (await sync_now(client, busy, source_id)).status == 202
        # The workspace holds its three: its fourth sync is refused, and nothing of it starts.
        resp = await sync_now(client, busy, busy_sources[3])
        assert resp.status == 429, await resp.text()
        error = (await resp.json())["error"]
        assert error["code"] == "too_many_syncs" and "this workspace" in error["message"], error
        assert resp.headers["Retry-After"] == "60"
        assert (await wait_status(client, busy, busy_sources[3], "active"))["status"] == "active"
        assert busy_sources[3] not in client.app[RUNNER].running
        # Another workspace takes the fourth slot; then the process has none left for anyone.
        assert (await sync_now(client, second, second_source)).status == 202
        resp = await sync_now(client, third, third_source)
        assert resp.status == 429 and (await resp.json())["error"]["code"] == "too_many_syncs"
        assert "all 4 sync slots" in (await resp.json())["error"]["message"]
        assert third_source not in client.app[RUNNER].running
    finally:
        fake.charges_gate.set()
        await wait_idle(client)
    for key, source_id in [*((busy, s) for s in busy_sources[:3]), (second, second_source)]:
        assert (await wait_status(client, key, source_id, "active", "error"))["status"] == "active"
    # Slots free again: the refused sync runs when asked again.
    assert (await sync_now(client, third, third_source)).status == 202
    assert (await wait_status(client, third, third_source, "active", "error"))["status"] == "active"


async def test_a_source_created_with_no_slot_free_waits_for_the_job(client, make_key, stripe, pool):
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    key = await make_key("admin,read")
    held = [await stripe_source(client, key, url) for _ in range(3)]
    await hold_charges(fake)
    try:
        for source_id in held:
            assert (await sync_now(client, key, source_id)).status == 202
        resp = await client.post("/v1/data-sources", headers=bearer(key), json={
            "name": "later", "type": "stripe", "credentials": {"api_key": STRIPE_KEY}, "options": {"base_url": url}})
        assert resp.status == 201 and (await resp.json())["status"] == "testing"
        later = (await resp.json())["id"]
        assert later not in client.app[RUNNER].running  # its check waits for a slot
    finally:
        fake.charges_gate.set()
        await wait_idle(client)
    assert (await wait_status(client, key, later, "testing"))["status"] == "testing"
    await run_job(client, pool, later)  # a testing source is the job's first pick
    body = await wait_status(client, key, later, "active", "error")
    assert body["status"] == "active" and body["last_synced_at"] is not None, body


async def test_a_source_whose_scheduled_run_ended_syncs_when_asked_while_the_job_fills_its_slot(
        client, make_key, stripe, pool, monkeypatch):
    """A run the job started gives its slot to the next due source when it ends. The source said `active` by
    then, but a sync asked for before that claim ended was a 409 "a run is already in progress"."""
    import storage.data_sources

    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    key = await make_key("admin,read")
    source_id = await stripe_source(client, key, url)
    claim_next_due, armed, refilling, refill = storage.data_sources.claim_next_due, [], asyncio.Event(), asyncio.Event()

    async def held_claim(*args, **kwargs):
        if armed:  # the claim of the slot the run freed waits here
            refilling.set()
            await refill.wait()
        return await claim_next_due(*args, **kwargs)

    monkeypatch.setattr(storage.data_sources, "claim_next_due", held_claim)
    await hold_charges(fake)
    try:
        await run_due_job(client, pool, source_id)
        armed.append(True)  # the job's own claims are over: the next one is the refill
        fake.charges_gate.set()
        assert (await wait_status(client, key, source_id, "active"))["status"] == "active"
        await asyncio.wait_for(refilling.wait(), 30)
        asked = asyncio.create_task(sync_now(client, key, source_id))
        await asyncio.sleep(0.2)
    finally:
        refill.set()
    resp = await asked
    assert resp.status == 202, await resp.text()
    assert (await wait_status(client, key, source_id, "active", "error"))["status"] == "active"
