"""Stripe and HubSpot over their HTTP APIs (local fakes), every connector's default (unreachable) host,
and secrets never reaching logs, responses or the stored row."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from tests.conftest import bearer
from tests.fake_peers import STRIPE_KEY, FakeHubSpot, base_url, serve
from tests.test_data_sources import create, wait_idle, wait_status


def customer(n: int, created: int) -> dict:
    return {"id": f"cus_{n}", "object": "customer", "email": f"c{n}@example.com", "name": f"Customer {n}",
            "phone": None, "created": created, "metadata": {}}


def charge(n: int, cust: int, created: int, status: str = "succeeded") -> dict:
    return {"id": f"ch_{n}", "object": "charge", "amount": 1000 + n, "currency": "usd", "status": status,
            "paid": status == "succeeded", "refunded": False, "amount_refunded": 0, "customer": f"cus_{cust}",
            "created": created, "description": None}


async def named(client, key: str, name: str) -> list[dict]:
    return (await (await client.get(f"/v1/events?event={name}", headers=bearer(key))).json())["data"]


async def test_stripe_customers_become_profiles_and_charges_events(client, make_key, stripe, monkeypatch):
    fake, url = stripe
    monkeypatch.setattr("app.sources.stripe.PAGE", 2)  # exercise paging with a handful of objects
    fake.customers = [customer(1, 1_700_000_000), customer(2, 1_700_000_100), customer(3, 1_700_000_200)]
    fake.charges = [charge(1, 1, 1_700_000_300), charge(2, 2, 1_700_000_400, "failed"),
                    charge(3, 1, 1_700_000_500)]
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    profile = await (await client.get("/v1/users/cus_1", headers=bearer(key))).json()
    assert profile["traits"]["email"] == "c1@example.com" and profile["traits"]["name"] == "Customer 1"
    assert profile["traits"]["created_at"] == "2023-11-14T22:13:20Z"
    assert profile["event_count"] == 2
    succeeded = await named(client, key, "charge_succeeded")
    assert [e["properties"]["charge_id"] for e in succeeded] == ["ch_3", "ch_1"]
    assert succeeded[0]["properties"]["amount"] == 1003 and succeeded[0]["properties"]["currency"] == "usd"
    assert [e["user_id"] for e in await named(client, key, "charge_failed")] == ["cus_2"]

    # Incremental: a charge in the same second as the newest one and a later one; nothing twice.
    fake.charges += [charge(4, 3, 1_700_000_500), charge(5, 3, 1_700_000_600)]
    fake.customers.append(customer(4, 1_700_000_700))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
    body = await wait_status(client, key, created["id"], "active")
    ids = sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded"))
    assert ids == ["ch_1", "ch_3", "ch_4", "ch_5"]
    assert (await client.get("/v1/users/cus_4", headers=bearer(key))).status == 200
    assert body["rows_imported"] == 6 + 3


async def test_stripe_rejected_key_is_error(client, make_key, stripe):
    _, url = stripe
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe",
                                         "credentials": {"api_key": "sk_test_WrongKey999"},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "error")
    # Stripe's own message, passed on by the SDK (Stripe masks the key in it).
    assert body["status_reason"] == ("Stripe rejected the credentials (HTTP 401): "
                                     "Invalid API Key provided: sk_test_****y999")


def refund(n: int, ch: int, created: int, amount: int = 500) -> dict:
    return {"id": f"re_{n}", "object": "refund", "amount": amount, "currency": "usd", "charge": f"ch_{ch}",
            "status": "succeeded", "reason": "requested_by_customer", "created": created}


async def sync_again(client, key: str, source_id: str) -> dict:
    assert (await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))).status == 202
    body = await wait_status(client, key, source_id, "active", "error")
    await wait_idle(client)
    return body


async def test_stripe_refund_made_after_its_charge_was_imported_is_an_event_once(client, make_key, stripe,
                                                                                 monkeypatch):
    fake, url = stripe
    monkeypatch.setattr("app.sources.stripe.PAGE", 2)
    fake.customers = [customer(1, 1_700_000_000), customer(2, 1_700_000_000)]
    fake.charges = [charge(1, 1, 1_700_000_100), charge(2, 2, 1_700_000_200), charge(3, 2, 1_700_000_300)]
    fake.refunds = [refund(1, 1, 1_700_000_150, amount=300)]
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    [first] = await named(client, key, "charge_refunded")
    assert first["user_id"] == "cus_1"
    assert first["properties"] == {"refund_id": "re_1", "charge_id": "ch_1", "amount": 300, "currency": "usd",
                                   "status": "succeeded", "reason": "requested_by_customer"}
    imported = body["rows_imported"]

    # Charges already imported are refunded later: their refunds come in by their own `created`.
    fake.refunds.append(refund(2, 2, 1_700_000_900))
    body = await sync_again(client, key, created["id"])
    assert body["status"] == "active", body
    refunds = await named(client, key, "charge_refunded")
    assert [(e["properties"]["refund_id"], e["user_id"]) for e in refunds] == [("re_2", "cus_2"), ("re_1", "cus_1")]
    assert body["rows_imported"] == imported + 1
    # One more in the newest second already synced: imported, and the earlier one not again.
    fake.refunds.append(refund(3, 3, 1_700_000_900))
    body = await sync_again(client, key, created["id"])
    assert sorted(e["properties"]["refund_id"] for e in await named(client, key, "charge_refunded")) == [
        "re_1", "re_2", "re_3"]
    assert body["rows_imported"] == imported + 2
    # Nothing new: nothing imported.
    body = await sync_again(client, key, created["id"])
    assert body["rows_imported"] == imported + 2
    assert len(await named(client, key, "charge_refunded")) == 3
    assert len(await named(client, key, "charge_succeeded")) == 3


@pytest.mark.parametrize(("kind", "permission", "what_for"), [
    ("refunds", "rak_refund_read", ""),
    ("events", "rak_event_read", "charge outcomes and customer changes"),
])
async def test_a_stripe_key_without_a_read_permission_keeps_what_it_read_and_says_why(
        client, make_key, stripe, kind, permission, what_for):
    """A restricted key without read access to refunds, or to events (read after the listings): the sync
    commits the customers and charges, then ends in `error` with Stripe's message naming the permission."""
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    setattr(fake, f"{kind}_forbidden", True)
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "error")
    assert body["status_reason"].startswith("Stripe rejected the credentials (HTTP 403): The provided key "), body
    assert permission in body["status_reason"] and what_for in body["status_reason"]
    assert [e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")] == ["ch_1"]
    assert (await client.get("/v1/users/cus_1", headers=bearer(key))).status == 200


async def _sync_between_pages(client, make_key, stripe) -> tuple:
    """A Stripe source whose first sync has read its customers and waits at its charges' gate: (the fake,
    an admin key, the created source)."""
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    fake.charges_gate = asyncio.Event()
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    await asyncio.wait_for(fake.charges_asked.wait(), 30)  # the sync is between its two pages
    return fake, key, created


@pytest.mark.parametrize("action", ["delete", "pause"])
async def test_delete_or_pause_during_a_sync_stops_it(client, make_key, stripe, action):
    fake, key, created = await _sync_between_pages(client, make_key, stripe)
    assert (await client.get(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 200
    if action == "delete":
        assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 204
    else:
        assert (await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(key))).status == 200
    fake.charges_gate.set()
    await wait_idle(client)
    assert await named(client, key, "charge_succeeded") == []
    # The page committed before the stop is kept.
    assert (await client.get("/v1/users/cus_1", headers=bearer(key))).status == 200
    if action == "pause":
        body = await wait_status(client, key, created["id"], "paused")
        assert body["last_synced_at"] is None
    else:
        assert (await client.get(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 404


def contact(n: int, updated: str) -> dict:
    return {"id": str(100 + n), "createdAt": "2024-01-01T00:00:00Z", "updatedAt": updated,
            "properties": {"email": f"h{n}@example.com", "firstname": "Ada", "lastname": f"L{n}",
                           "company": "Acme", "hs_object_id": str(100 + n), "phone": None}}


async def test_hubspot_oauth_contacts_become_profiles(client, make_key):
    fake = FakeHubSpot(access_token="hub-access-token-xyz")
    fake.contacts = [contact(i, "2024-02-01T00:00:00Z") for i in range(3)]
    server = await serve(fake.app())
    try:
        key = await make_key("admin,read")
        created = await create(client, key, {
            "name": "crm", "type": "hubspot", "options": {"base_url": base_url(server)},
            "credentials": {"client_id": fake.client_id, "client_secret": fake.client_secret,
                            "refresh_token": fake.refresh_token},
        })
        body = await wait_status(client, key, created["id"], "active", "error")
        assert body["status"] == "active", body
        profile = await (await client.get("/v1/users/101", headers=bearer(key))).json()
        assert profile["traits"]["email"] == "h1@example.com" and profile["traits"]["name"] == "Ada L1"
        assert profile["traits"]["company"] == "Acme" and "phone" not in profile["traits"]
        assert body["rows_imported"] == 3
        # Only contacts updated since the last sync count again.
        fake.contacts[0] = {**contact(0, "2024-03-01T00:00:00Z"),
                            "properties": {**contact(0, "")["properties"], "company": "Globex"}}
        assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))).status == 202
        body = await wait_status(client, key, created["id"], "active")
        assert body["rows_imported"] == 4
        profile = await (await client.get("/v1/users/100", headers=bearer(key))).json()
        assert profile["traits"]["company"] == "Globex"

        bad = await create(client, key, {
            "name": "crm2", "type": "hubspot", "options": {"base_url": base_url(server)},
            "credentials": {"client_id": fake.client_id, "client_secret": "wrong", "refresh_token": "nope"},
        })
        body = await wait_status(client, key, bad["id"], "error")
        assert body["status_reason"] == "HubSpot answered HTTP 400 to POST /oauth/v1/token"
    finally:
        await server.close()


def _service_account_key() -> dict:
    from tests.fake_bigquery import new_service_account

    key, _ = new_service_account("https://oauth2.googleapis.com/token")
    return key


@pytest.mark.parametrize(("body", "reason"), [
    ({"type": "bigquery", "credentials": {"project_id": "p", "dataset": "d",
                                          "service_account_key": _service_account_key()}},
     "could not connect to oauth2.googleapis.com:443"),  # the key's token_uri: Google's, by default
    ({"type": "bigquery", "credentials": {"project_id": "p", "dataset": "d", "service_account_key": {
        "type": "service_account", "client_email": "x@p.iam.gserviceaccount.com", "private_key": "pk"}}},
     "the service account key cannot be used: its private_key does not parse"),
    ({"type": "snowflake", "credentials": {"account": "tally-nowhere-xy12345", "warehouse": "w", "database": "d",
                                           "username": "u", "password": "unused-pw-123"}},
     "could not connect to tally-nowhere-xy12345.snowflakecomputing.com:443"),
    ({"type": "salesforce", "credentials": {"client_id": "cid-1", "client_secret": "secret-1",
                                            "refresh_token": "refresh-1"}},
     "could not reach Salesforce at https://login.salesforce.com"),
])
async def test_default_hosts_unreachable_end_in_error_with_a_reason(make_client, settings, make_key, body, reason):
    """No network here: the real provider hosts are unreachable, and the check says so within its timeout."""
    client = await make_client(dataclasses.replace(settings, source_timeout_seconds=2.0))
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "w", **body})
    result = await wait_status(client, key, created["id"], "error", tries=1200)
    assert result["status_reason"].startswith(reason), result


async def test_secrets_never_reach_logs_responses_or_the_row(client, make_key, stripe, caplog, pool):
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    secrets_used = [STRIPE_KEY, "sk_test_WrongSecret77", "mysql-Secret-pw-123", "hub-Secret-refresh-9"]
    caplog.set_level(logging.DEBUG)
    for name in ("aiohttp.access", "aiohttp.server", "aiohttp.web", "asyncio", "tally"):
        caplog.set_level(logging.DEBUG, logger=name)
    key = await make_key("admin,read")
    bodies = [
        {"name": "ok", "type": "stripe", "credentials": {"api_key": STRIPE_KEY}, "options": {"base_url": url}},
        {"name": "bad", "type": "stripe", "credentials": {"api_key": secrets_used[1]}, "options": {"base_url": url}},
        {"name": "db", "type": "mysql", "credentials": {"host": "127.0.0.1", "database": "mysql", "username": "root",
                                                        "password": secrets_used[2]}},
        {"name": "crm", "type": "hubspot", "options": {"base_url": "http://127.0.0.1:1"},
         "credentials": {"client_id": "c", "client_secret": "s3cr3t-client", "refresh_token": secrets_used[3]}},
    ]
    texts = []
    ids = []
    statuses = []
    for body in bodies:
        resp = await client.post("/v1/data-sources", json=body, headers=bearer(key))
        assert resp.status == 201
        texts.append(await resp.text())
        ids.append((await resp.json())["id"])
        # One at a time: a workspace runs three syncs at once, and a fourth created meanwhile waits for the
        # scheduler's next round (a minute), longer than wait_status waits.
        statuses.append((await wait_status(client, key, ids[-1], "active", "error"))["status"])
    assert statuses == ["active", "error", "error", "error"]
    assert (await client.post(f"/v1/data-sources/{ids[0]}/sync", headers=bearer(key))).status == 202
    await wait_status(client, key, ids[0], "active")
    bad = await client.post("/v1/data-sources", json={**bodies[0], "credentials": {"api_key": STRIPE_KEY, "x": 1}},
                            headers=bearer(key))
    assert bad.status == 400
    texts.append(await bad.text())
    texts.append(await (await client.get("/v1/data-sources", headers=bearer(key))).text())
    for source_id in ids:
        texts.append(await (await client.get(f"/v1/data-sources/{source_id}", headers=bearer(key))).text())
    stored = [bytes(r["credentials"]) for r in await pool.fetch(
        "SELECT credentials FROM data_sources WHERE id = ANY($1)", ids)]
    assert caplog.records, "expected log output to inspect"
    assert {"tally.sources", "aiohttp.access"} <= {r.name for r in caplog.records}
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    for secret in [*secrets_used, "s3cr3t-client"]:
        assert secret not in logged
        assert all(secret not in t for t in texts)
        assert all(secret.encode() not in row for row in stored)


async def test_resume_during_a_sync_does_not_let_a_second_run_start(client, make_key, stripe):
    """Pause and resume while a sync is between pages: the run still holds the source, so "sync now" is a 409,
    not a second run reading from the same cursor (every charge imported twice)."""
    fake, key, created = await _sync_between_pages(client, make_key, stripe)
    path = f"/v1/data-sources/{created['id']}"
    assert (await client.post(f"{path}/pause", headers=bearer(key))).status == 200
    assert (await client.post(f"{path}/resume", headers=bearer(key))).status == 200
    again = await client.post(f"{path}/sync", headers=bearer(key))
    fake.charges_gate.set()
    await wait_idle(client)
    assert again.status == 409, await again.text()
    assert [e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")] == ["ch_1"]


@pytest.mark.parametrize("outcome", ["fails", "succeeds"])
async def test_a_run_resumed_mid_sync_ends_as_a_fresh_run_would(client, make_key, stripe, outcome):
    """Pause and resume while a sync is between pages: the source says `syncing` while the run goes on, and
    the run ends in `error` with its reason when its next page fails (it stayed `active`, the reason beside
    it), or `active` with last_synced_at when it succeeds, as a run never paused does."""
    fake, key, created = await _sync_between_pages(client, make_key, stripe)
    path = f"/v1/data-sources/{created['id']}"
    assert (await client.post(f"{path}/pause", headers=bearer(key))).status == 200
    resumed = await client.post(f"{path}/resume", headers=bearer(key))
    assert (await resumed.json())["status"] == "syncing"
    if outcome == "fails":
        fake.api_key = "sk_test_RolledKey0000"  # the key was rolled meanwhile: Stripe refuses the next page
    fake.charges_gate.set()
    await wait_idle(client)
    body = await (await client.get(path, headers=bearer(key))).json()
    if outcome == "fails":
        assert body["status"] == "error", body
        assert body["status_reason"] == ("Stripe rejected the credentials (HTTP 401): "
                                         "Invalid API Key provided: sk_test_****abcd")
        assert body["last_synced_at"] is None
    else:
        assert body["status"] == "active" and body["status_reason"] is None, body
        assert body["last_synced_at"] is not None
        assert [e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")] == ["ch_1"]


async def test_stripe_sync_cut_short_keeps_its_pages_and_resumes_below_them(client, make_key, stripe, monkeypatch):
    """Stripe pages are committed as they are listed (they used to be held in memory until a kind's last page,
    so a failure after an hour of a big backfill kept nothing), and the next sync lists only below the last
    page committed: every charge once, a second shared across the cut included."""
    fake, url = stripe
    monkeypatch.setattr("app.sources.stripe.PAGE", 2)
    fake.customers = [customer(1, 1_700_000_000)]
    fake.charges = [charge(1, 1, 1_700_000_100), charge(2, 1, 1_700_000_200), charge(3, 1, 1_700_000_300),
                    charge(4, 1, 1_700_000_300), charge(5, 1, 1_700_000_400)]
    fake.fail_charges_request = 2
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY},
                                         "options": {"base_url": url}})
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "error" and body["status_reason"] == "Stripe answered HTTP 400: Simulated failure."
    # The first page (newest first: ch_5, then ch_4 of the second both ch_3 and ch_4 were created in).
    assert sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")) == [
        "ch_4", "ch_5"]

    body = await sync_again(client, key, created["id"])
    assert body["status"] == "active", body
    ids = sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded"))
    assert ids == ["ch_1", "ch_2", "ch_3", "ch_4", "ch_5"]
    # Then incremental from the newest second: a charge in it and a later one, nothing twice.
    fake.charges += [charge(6, 1, 1_700_000_400), charge(7, 1, 1_700_000_500)]
    body = await sync_again(client, key, created["id"])
    ids = sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded"))
    assert ids == ["ch_1", "ch_2", "ch_3", "ch_4", "ch_5", "ch_6", "ch_7"]
    assert body["rows_imported"] == 1 + 7
