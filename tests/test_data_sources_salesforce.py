"""Salesforce against a local fake of its REST API: a standard object by access token, a custom object
by SOQL with OAuth refresh credentials, incremental syncs on SystemModstamp across nextRecordsUrl
pages, rate-limit answers, and the error cases with the tokens kept out of sight."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import bearer
from tests.fake_peers import base_url, serve
from tests.fake_salesforce import FakeSalesforce
from tests.test_data_sources import create, run_job, wait_status
from tests.test_data_sources_sql import events

OPPORTUNITY = {"Id": "id", "Name": "string", "Amount": "currency", "StageName": "picklist",
               "AccountId": "reference", "BillingAddress": "address", "CreatedDate": "datetime",
               "SystemModstamp": "datetime"}
INVOICE = {"Id": "id", "Name": "string", "Total__c": "currency", "Status__c": "picklist", "Contact__c": "reference",
           "Issued__c": "datetime", "SystemModstamp": "datetime"}


def opportunity(n: int, stamp: str, stage: str = "Prospecting") -> dict:
    return {"Id": f"006xx00000{n:05d}AAA", "Name": f"Deal {n}", "Amount": 1000.0 * n, "StageName": stage,
            "AccountId": f"001xx00000{n:05d}AAA", "BillingAddress": None,
            "CreatedDate": "2024-01-01T00:00:00.000+0000", "SystemModstamp": stamp}


def invoice(n: int, stamp: str, status: str = "Paid") -> dict:
    return {"Id": f"a01xx00000{n:05d}AAA", "Name": f"INV-{n}", "Total__c": 10.5 * n, "Status__c": status,
            "Contact__c": f"003xx00000{n:05d}AAA", "Issued__c": f"2024-02-0{n}T09:00:00.000+0000",
            "SystemModstamp": stamp}


@pytest.fixture
async def salesforce():
    fake = FakeSalesforce(batch_size=2)
    fake.schemas = {"Opportunity": OPPORTUNITY, "Invoice__c": INVOICE}
    server = await serve(fake.app())
    fake.url = base_url(server)
    yield fake
    await server.close()


def token_source(fake: FakeSalesforce, **options) -> dict:
    return {"name": "crm", "type": "salesforce",
            "credentials": {"access_token": fake.access_token, "instance_url": fake.url},
            "options": {"table": "Opportunity", **options}}


async def sync_now(client, key: str, source_id: str) -> dict:
    assert (await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))).status == 202
    return await wait_status(client, key, source_id, "active", "error")


async def test_standard_object_by_access_token_incremental_on_systemmodstamp(client, make_key, salesforce):
    fake = salesforce
    fake.records["Opportunity"] = [opportunity(i, f"2024-03-0{i}T10:00:00.000+0000") for i in range(1, 6)]
    admin = await make_key("admin,read")
    created = await create(client, admin, token_source(fake))
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert body["rows_imported"] == 5
    got = await events(client, admin, "opportunity")
    assert [e["properties"]["Name"] for e in got] == ["Deal 5", "Deal 4", "Deal 3", "Deal 2", "Deal 1"]
    assert got[0]["timestamp"] == "2024-03-05T10:00:00.000Z" and got[0]["user_id"] is None
    assert got[0]["properties"] == {"Id": "006xx0000000005AAA", "Name": "Deal 5", "Amount": 5000.0,
                                    "StageName": "Prospecting", "AccountId": "001xx0000000005AAA",
                                    "CreatedDate": "2024-01-01T00:00:00.000+0000",
                                    "SystemModstamp": "2024-03-05T10:00:00.000+0000"}
    first = [q for q in fake.soql if "LIMIT" not in q]
    assert first == ["SELECT Id, SystemModstamp, Name, Amount, StageName, AccountId, CreatedDate FROM Opportunity "
                     "WHERE SystemModstamp != null ORDER BY SystemModstamp ASC, Id ASC"]

    # An edited deal, a new one in the same second as the last cursor (a higher Id), a later new one.
    fake.records["Opportunity"][1] = opportunity(2, "2024-03-06T10:00:00.000+0000", stage="Closed Won")
    fake.records["Opportunity"] += [opportunity(6, "2024-03-05T10:00:00.000+0000"),
                                    opportunity(7, "2024-03-07T10:00:00.000+0000")]
    body = await sync_now(client, admin, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 8
    got = await events(client, admin, "opportunity")
    assert [e["properties"]["Name"] for e in got[:3]] == ["Deal 7", "Deal 2", "Deal 6"]
    assert got[1]["properties"]["StageName"] == "Closed Won"
    assert ("(SystemModstamp > 2024-03-05T10:00:00Z OR (SystemModstamp = 2024-03-05T10:00:00Z AND "
            "Id > '006xx0000000005AAA'))") in fake.soql[-1]
    assert (await sync_now(client, admin, created["id"]))["rows_imported"] == 8  # nothing new, nothing twice


async def test_custom_object_by_soql_with_refresh_credentials(client, make_key, salesforce, caplog):
    fake = salesforce
    caplog.set_level(logging.DEBUG)
    fake.records["Invoice__c"] = [invoice(1, "2024-03-01T10:00:00.000+0000"),
                                  invoice(2, "2024-03-02T10:00:00.000+0000", status="Draft"),
                                  invoice(3, "2024-03-03T10:00:00.000+0000")]
    admin = await make_key("admin,read")
    created = await create(client, admin, {
        "name": "billing", "type": "salesforce", "credentials": {
            "client_id": fake.client_id, "client_secret": fake.client_secret, "refresh_token": fake.refresh_token},
        "options": {"base_url": fake.url, "query": "SELECT Name, Total__c, Contact__c, Issued__c FROM Invoice__c "
                                                   "WHERE Status__c = 'Paid'",
                    "event_name": "invoice_paid", "user_id_column": "contact__c", "timestamp_column": "Issued__c",
                    "properties": {"invoice": "Name", "total": "Total__c"}},
    })
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    got = await events(client, admin, "invoice_paid")
    assert [(e["user_id"], e["properties"]) for e in got] == [
        ("003xx0000000003AAA", {"invoice": "INV-3", "total": 31.5}),
        ("003xx0000000001AAA", {"invoice": "INV-1", "total": 10.5})]
    assert got[0]["timestamp"] == "2024-02-03T09:00:00.000Z"
    fake.records["Invoice__c"].append(invoice(4, "2024-03-04T10:00:00.000+0000"))
    body = await sync_now(client, admin, created["id"])
    assert body["status"] == "active" and len(await events(client, admin, "invoice_paid")) == 3
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "POST /services/oauth2/token" in logged  # the fake's access log: the exchange was logged...
    for secret in (fake.client_secret, fake.refresh_token, fake.access_token):  # ...without the secrets
        assert secret not in logged


async def test_rate_limit_answers_are_honoured(client, make_key, salesforce):
    fake = salesforce
    fake.records["Opportunity"] = [opportunity(i, f"2024-03-0{i}T10:00:00.000+0000") for i in range(1, 6)]
    fake.busy_answers = 2  # two 429s with Retry-After: 0, retried
    fake.exhaust_after = 2  # then the org's daily allowance runs out after two pages
    admin = await make_key("admin,read")
    created = await create(client, admin, token_source(fake))
    body = await wait_status(client, admin, created["id"], "error")
    assert "API request limit for the org is used up (REQUEST_LIMIT_EXCEEDED)" in body["status_reason"]
    # The check's one-record query was the first page served; the sync's first page is kept.
    assert len(await events(client, admin, "opportunity")) == 2
    assert fake.busy_answers == 0  # both 429s were answered, and waited out
    fake.exhaust_after = None
    body = await sync_now(client, admin, created["id"])
    assert body["status"] == "active" and body["status_reason"] is None
    names = sorted(e["properties"]["Name"] for e in await events(client, admin, "opportunity"))
    assert names == [f"Deal {i}" for i in range(1, 6)]


async def test_sync_stops_when_the_org_nearly_runs_out_of_api_requests(client, make_key, salesforce):
    fake = salesforce
    fake.records["Opportunity"] = [opportunity(i, f"2024-03-0{i}T10:00:00.000+0000") for i in range(1, 6)]
    fake.api_limit = 4  # describe (1), query LIMIT 1 (2), describe (3), first page (4 of 4: over 90%)
    admin = await make_key("admin,read")
    created = await create(client, admin, token_source(fake))
    body = await wait_status(client, admin, created["id"], "error")
    assert body["status_reason"].startswith("stopped at 4 of the org's 4 daily Salesforce API requests")
    assert len(await events(client, admin, "opportunity")) == 2
    fake.api_limit = 15000
    assert (await sync_now(client, admin, created["id"]))["status"] == "active"
    assert len(await events(client, admin, "opportunity")) == 5


async def test_pause_and_resume_then_a_scheduled_sync(client, make_key, salesforce, pool):
    fake = salesforce
    fake.records["Opportunity"] = [opportunity(1, "2024-03-01T10:00:00.000+0000")]
    admin = await make_key("admin,read")
    created = await create(client, admin, {**token_source(fake), "schedule": {"frequency": "hourly"}})
    assert (await wait_status(client, admin, created["id"], "active", "error"))["status"] == "active"
    paused = await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(admin))
    assert (await paused.json())["status"] == "paused"
    fake.records["Opportunity"].append(opportunity(2, "2024-03-02T10:00:00.000+0000"))
    due = "UPDATE data_sources SET next_sync_at = now() - interval '1 minute' WHERE id = $1"
    await pool.execute(due, created["id"])
    await run_job(client, pool, created["id"])
    assert (await wait_status(client, admin, created["id"], "paused"))["status"] == "paused"
    assert len(await events(client, admin, "opportunity")) == 1
    resumed = await client.post(f"/v1/data-sources/{created['id']}/resume", headers=bearer(admin))
    assert (await resumed.json())["status"] == "active"
    await pool.execute(due, created["id"])
    await run_job(client, pool, created["id"])
    body = await wait_status(client, admin, created["id"], "active")
    assert body["rows_imported"] == 2
    assert len(await events(client, admin, "opportunity")) == 2


@pytest.mark.parametrize("case", ["bad_token", "bad_refresh", "unreachable", "missing_object", "bad_query"])
async def test_salesforce_failures_end_in_error_with_a_reason(client, make_key, salesforce, case, caplog):
    fake = salesforce
    caplog.set_level(logging.DEBUG)
    secret = fake.access_token
    source = token_source(fake)
    if case == "bad_token":
        secret = "00Dxx0000001gPL!AQ4AQWrongToken"
        source["credentials"]["access_token"] = secret
    elif case == "bad_refresh":
        secret = "5AepWrong-refresh-token"
        source["credentials"] = {"client_id": fake.client_id, "client_secret": fake.client_secret,
                                 "refresh_token": secret}
        source["options"]["base_url"] = fake.url
    elif case == "unreachable":
        source["credentials"]["instance_url"] = "http://127.0.0.1:1"
    elif case == "missing_object":
        source["options"]["table"] = "Invoice2__c"
    else:
        del source["options"]["table"]
        source["options"]["query"] = "SELECT Name, Colour__c FROM Opportunity"
    admin = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", json=source, headers=bearer(admin))
    assert resp.status == 201 and secret not in await resp.text()
    body = await wait_status(client, admin, (await resp.json())["id"], "error")
    expected = {
        "bad_token": "Salesforce rejected the access token (INVALID_SESSION_ID)",
        "bad_refresh": "Salesforce refused the refresh token: invalid_grant (authentication failure)",
        "unreachable": "could not reach Salesforce at http://127.0.0.1:1",
        "missing_object": "Salesforce has no object Invoice2__c (or this user may not see it)",
        "bad_query": "Salesforce answered HTTP 400 (INVALID_FIELD): No such column 'Colour__c' on entity "
                     "'Opportunity'.",
    }
    assert body["status_reason"] == expected[case]
    lines = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "data source sync failed" in lines
    assert secret not in lines and secret not in str(body)


@pytest.mark.parametrize(("credentials", "field"), [
    ({"access_token": "tok"}, "credentials.instance_url"),
    ({"access_token": "tok", "instance_url": "ftp://x"}, "credentials.instance_url"),
    ({"client_id": "c", "client_secret": "s"}, "credentials.refresh_token"),
])
async def test_salesforce_credentials_are_validated(client, make_key, credentials, field):
    admin = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", json={"name": "crm", "type": "salesforce",
                                                       "credentials": credentials}, headers=bearer(admin))
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == field
