"""Stripe changes after creation, read from Stripe's events (a local fake behind the official SDK): a charge
imported while pending gets its outcome as an event of its own, once; a customer's later changes reach the
profile; a cut mid-stream resumes without loss or duplicates; a cursor stored before updates were read
still syncs."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from tests.conftest import bearer
from tests.fake_peers import FakeStripe
from tests.test_data_sources import create, wait_idle, wait_status
from tests.test_data_sources_http import STRIPE_KEY, charge, customer, named, sync_again

DAY = 86_400
# Relative to now: Stripe keeps events 30 days, and the stream never starts earlier than that.
T0 = int(time.time()) - 10 * DAY


async def start(client, make_key, stripe) -> tuple[FakeStripe, str, dict]:
    """A Stripe source after its first sync: (the fake, an admin key, the source as GET shows it)."""
    fake, url = stripe
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    await wait_idle(client)
    return fake, key, body


def settle(fake: FakeStripe, n: int, status: str, at: int) -> dict:
    """Charge ch_n's pending debit ends in `status` at `at`: the charge changes and Stripe records the event."""
    ch = next(c for c in fake.charges if c["id"] == f"ch_{n}")
    ch.update(status=status, paid=status == "succeeded")
    fake.event(f"charge.{status}", ch, at)
    return ch


def pending(fake: FakeStripe, n: int, cust: int, created: int) -> dict:
    ch = charge(n, cust, created, "pending")
    fake.charges.append(ch)
    fake.event("charge.pending", ch, created)
    return ch


def charge_ids(events: list[dict]) -> list[str]:
    return sorted(e["properties"]["charge_id"] for e in events)


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
async def test_a_pending_charge_gets_its_outcome_once_at_the_time_it_happened(client, make_key, stripe, outcome):
    fake, _ = stripe
    fake.customers = [customer(1, T0)]
    pending(fake, 1, 1, T0 + 100)
    fake, key, body = await start(client, make_key, stripe)
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1"]
    imported = body["rows_imported"]

    settle(fake, 1, outcome, T0 + 3 * DAY)
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    [event] = await named(client, key, f"charge_{outcome}")
    assert event["user_id"] == "cus_1"
    assert event["timestamp"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 3 * DAY)))
    # The properties an imported charge has, as the charge was when it settled.
    assert event["properties"] == {"charge_id": "ch_1", "amount": 1001, "currency": "usd", "status": outcome,
                                   "paid": outcome == "succeeded", "refunded": False, "amount_refunded": 0,
                                   "description": None}
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1"]  # the history stays
    assert body["rows_imported"] == imported + 1

    body = await sync_again(client, key, body["id"])  # nothing new: nothing again
    assert len(await named(client, key, f"charge_{outcome}")) == 1
    assert body["rows_imported"] == imported + 1


async def test_a_charge_created_and_settled_between_syncs_counts_once(client, make_key, stripe):
    fake, _ = stripe
    fake.customers = [customer(1, T0)]
    fake.charges = [charge(1, 1, T0 + 10)]
    fake, key, body = await start(client, make_key, stripe)

    pending(fake, 2, 1, T0 + DAY)
    settle(fake, 2, "succeeded", T0 + 2 * DAY)
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    # The listing reads it as it is now; its settling event is not a second one.
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_2"]
    assert await named(client, key, "charge_pending") == []
    body = await sync_again(client, key, body["id"])
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_2"]


async def test_a_customer_change_reaches_the_profile_newest_last(client, make_key, stripe, monkeypatch):
    monkeypatch.setattr("app.sources.stripe.PAGE", 1)  # each change on a page of its own
    fake, _ = stripe
    fake.customers = [customer(1, T0), customer(2, T0 + 5)]
    fake, key, body = await start(client, make_key, stripe)

    cus = fake.customers[0]
    for n, email in enumerate(["first@example.com", "second@example.com", "third@example.com"]):
        cus.update(email=email, name=f"Renamed {n}")
        fake.event("customer.updated", cus, T0 + DAY + n)
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    profile = await (await client.get("/v1/users/cus_1", headers=bearer(key))).json()
    assert profile["traits"]["email"] == "third@example.com" and profile["traits"]["name"] == "Renamed 2"
    assert profile["traits"]["stripe_customer_id"] == "cus_1" and profile["traits"]["created_at"]
    other = await (await client.get("/v1/users/cus_2", headers=bearer(key))).json()
    assert other["traits"]["email"] == "c2@example.com"


async def test_a_cut_mid_stream_resumes_without_loss_or_duplicates(client, make_key, stripe, monkeypatch):
    monkeypatch.setattr("app.sources.stripe.PAGE", 2)
    fake, _ = stripe
    fake.customers = [customer(1, T0)]
    for n in range(1, 6):
        pending(fake, n, 1, T0 + n)
    fake, key, body = await start(client, make_key, stripe)
    assert len(await named(client, key, "charge_pending")) == 5

    # Newest first: ch_5 and the newest email on the first page, then the cut; the older email comes after it.
    cus = fake.customers[0]
    cus["email"] = "older@example.com"
    fake.event("customer.updated", cus, T0 + DAY)
    for n in range(1, 5):
        settle(fake, n, "succeeded", T0 + DAY + 10 * n)
    cus["email"] = "newest@example.com"
    fake.event("customer.updated", cus, T0 + DAY + 45)
    settle(fake, 5, "failed", T0 + DAY + 50)
    fake.fail_events_request = fake.events_requests + 2
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "error" and body["status_reason"] == "Stripe answered HTTP 400: Simulated failure."
    assert charge_ids(await named(client, key, "charge_failed")) == ["ch_5"]
    profile = await (await client.get("/v1/users/cus_1", headers=bearer(key))).json()
    assert profile["traits"]["email"] == "newest@example.com"

    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_2", "ch_3", "ch_4"]
    assert charge_ids(await named(client, key, "charge_failed")) == ["ch_5"]
    profile = await (await client.get("/v1/users/cus_1", headers=bearer(key))).json()
    assert profile["traits"]["email"] == "newest@example.com"  # the older change, read after the cut, did not win
    body = await sync_again(client, key, body["id"])
    assert len(await named(client, key, "charge_succeeded")) == 4
    assert len(await named(client, key, "charge_failed")) == 1


async def test_a_cursor_stored_before_updates_were_read_still_syncs(client, make_key, stripe, pool):
    fake, _ = stripe
    fake.customers = [customer(1, T0)]
    pending(fake, 1, 1, T0 + 10)
    pending(fake, 2, 1, T0 + 20)
    settle(fake, 2, "succeeded", T0 + 30)  # before the first sync: imported as succeeded
    fake, key, body = await start(client, make_key, stripe)
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1"]
    # The cursor as the release before this one stored it: customers, charges and refunds only.
    old = {k: v for k, v in json.loads(await pool.fetchval("SELECT sync_cursor::text FROM data_sources WHERE id = $1",
                                                           body["id"])).items()
           if k in ("customers", "charges", "refunds")}
    await pool.execute("UPDATE data_sources SET sync_cursor = $2::text::jsonb WHERE id = $1", body["id"],
                       json.dumps(old))

    settle(fake, 1, "succeeded", T0 + 2 * DAY)
    fake.charges.append(charge(3, 1, T0 + 2 * DAY + 5))
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_2", "ch_3"]
    body = await sync_again(client, key, body["id"])
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_2", "ch_3"]


async def test_a_charge_settling_between_its_listing_and_the_events_in_one_sync_gets_its_outcome(client, make_key,
                                                                                                 stripe):
    """The listing reads ch_1 pending; by the time the same sync reads the events, it has settled (the fake
    lists the charge as the listing saw it, while its events hold the outcome that came after)."""
    fake, _ = stripe
    fake.customers = [customer(1, T0)]
    listed = pending(fake, 1, 1, T0 + 100)
    fake.event("charge.succeeded", {**listed, "status": "succeeded", "paid": True}, T0 + 200)
    fake, key, body = await start(client, make_key, stripe)
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1"]
    [event] = await named(client, key, "charge_succeeded")
    assert event["timestamp"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(T0 + 200)))
    body = await sync_again(client, key, body["id"])  # taken off the list: never again
    assert body["status"] == "active", body
    assert len(await named(client, key, "charge_succeeded")) == 1
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1"]


async def test_a_pause_longer_than_stripes_events_still_brings_outcomes_and_customer_changes(client, make_key,
                                                                                             stripe, pool):
    """Stripe keeps events 30 days. A source paused (or failing) for longer came back to a stream with a gap: a
    pending charge that settled in it, and a customer changed in it, had no event left, so the outcome never
    came and the profile kept its old traits. Now a sync that finds such a gap asks Stripe for each pending
    charge as it is now and lists every customer again. A charge settled in the gap gets its outcome stamped at
    the gap's end (the latest it can have happened); one whose event Stripe still keeps, at the event's time; a
    charge Stripe no longer has is dropped from the list, and the stream goes on from there."""
    fake, _ = stripe
    now = int(time.time())
    fake.customers = [customer(1, now - 60 * DAY), customer(2, now - 60 * DAY)]
    for n in range(1, 6):
        pending(fake, n, 1 + n % 2, now - 50 * DAY + n)
    fake, key, body = await start(client, make_key, stripe)
    assert charge_ids(await named(client, key, "charge_pending")) == ["ch_1", "ch_2", "ch_3", "ch_4", "ch_5"]
    body = await sync_again(client, key, body["id"])  # no event for 30 days is no gap: the stream was read
    assert body["status"] == "active" and fake.charges_retrieved == [], body
    # The last sync was 45 days ago: where the stream left off, Stripe keeps no event any more.
    cursor = json.loads(await pool.fetchval("SELECT sync_cursor::text FROM data_sources WHERE id = $1", body["id"]))
    assert cursor["updates_read"] >= now
    cursor["updates"] = {"t": now - 45 * DAY, "ids": []}
    cursor["updates_read"] = now - 45 * DAY
    await pool.execute("UPDATE data_sources SET sync_cursor = $2::text::jsonb WHERE id = $1", body["id"],
                       json.dumps(cursor))

    settle(fake, 1, "succeeded", now - 40 * DAY)  # in the gap
    settle(fake, 2, "failed", now - 35 * DAY)  # in the gap
    settle(fake, 5, "succeeded", now - 10 * DAY)  # after the gap: Stripe still has its event
    fake.charges = [c for c in fake.charges if c["id"] != "ch_4"]  # gone from Stripe
    cus = fake.customers[0]
    cus.update(email="changed-in-gap@example.com")
    fake.event("customer.updated", cus, now - 38 * DAY)
    other = fake.customers[1]
    other.update(email="changed-lately@example.com")
    fake.event("customer.updated", other, now - 5 * DAY)
    fake.fail_events_request = fake.events_requests + 1  # the stream after the gap's commit is cut short
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "error" and await named(client, key, "charge_succeeded") == [], body
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    [succeeded, in_window] = sorted(await named(client, key, "charge_succeeded"),
                                    key=lambda e: e["properties"]["charge_id"])
    [failed] = await named(client, key, "charge_failed")
    assert [e["properties"]["charge_id"] for e in (succeeded, failed, in_window)] == ["ch_1", "ch_2", "ch_5"]
    for event in (succeeded, failed):
        stamped = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        assert now - 30 * DAY <= stamped <= time.time() - 29 * DAY, event
    assert in_window["timestamp"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 10 * DAY)))
    assert succeeded["properties"]["status"] == "succeeded" and succeeded["user_id"] == "cus_2"
    for n, email in ((1, "changed-in-gap@example.com"), (2, "changed-lately@example.com")):
        profile = await (await client.get(f"/v1/users/cus_{n}", headers=bearer(key))).json()
        assert profile["traits"]["email"] == email
    assert sorted(fake.charges_retrieved) == ["ch_1", "ch_2", "ch_3", "ch_4", "ch_5"]

    # ch_3 is still pending and still watched: its outcome comes from the stream as usual, once.
    settle(fake, 3, "succeeded", now - DAY)
    body = await sync_again(client, key, body["id"])
    body = await sync_again(client, key, body["id"])
    assert body["status"] == "active", body
    assert charge_ids(await named(client, key, "charge_succeeded")) == ["ch_1", "ch_3", "ch_5"]
    assert charge_ids(await named(client, key, "charge_failed")) == ["ch_2"]
    assert len(fake.charges_retrieved) == 5  # no gap any more: nothing asked again
