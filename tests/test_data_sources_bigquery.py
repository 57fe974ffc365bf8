"""BigQuery through the real google-cloud-bigquery client against a local fake of its REST endpoints
and of Google's token endpoint: first and incremental syncs across result pages, the options
model, and the error cases (bad key, unreachable API, missing table) with the key kept out of sight."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import bearer
from tests.fake_bigquery import FakeBigQuery, new_service_account
from tests.fake_peers import base_url, serve
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_sql import events

CLOSED = "http://127.0.0.1:1"


@pytest.fixture
async def bq():
    fake = FakeBigQuery()
    server = await serve(fake.app())
    url = base_url(server)
    key, public = new_service_account(f"{url}/token")
    fake.public_keys.append(public)
    fake.execute("CREATE SCHEMA analytics")
    fake.execute("""CREATE TABLE analytics.signups (id BIGINT, user_id VARCHAR, plan VARCHAR, amount DECIMAL(10, 2),
                    created_at TIMESTAMPTZ)""")
    yield fake, url, key
    await server.close()


def add_signups(fake: FakeBigQuery, *rows: tuple) -> None:
    for row in rows:
        fake.execute("INSERT INTO analytics.signups VALUES (?, ?, ?, 9.5, ?::TIMESTAMPTZ)", *row)


def bq_source(url: str, key: dict, **options) -> dict:
    return {"name": "warehouse", "type": "bigquery",
            "credentials": {"project_id": "tally-test", "dataset": "analytics", "service_account_key": key},
            "options": {"base_url": url, "table": "signups", "cursor_column": "created_at",
                        "event_name": "signed_up", **options}}


async def test_bigquery_first_sync_pages_then_incremental(client, make_key, bq, monkeypatch, caplog):
    fake, url, key = bq
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")  # clickhouse-connect turns it down to WARNING
    monkeypatch.setattr("app.sources.bigquery.PAGE", 2)  # several result pages from a handful of rows
    add_signups(fake, (1, "u1", "free", "2024-03-01T10:00:00Z"), (2, "u2", "pro", "2024-03-02T10:00:00Z"),
                (3, "u1", "pro", "2024-03-03T10:00:00Z"), (4, "u3", "team", "2024-03-03T11:00:00Z"),
                (5, "u4", "free", "2024-03-04T10:00:00Z"))
    admin = await make_key("admin,read")
    created = await create(client, admin, bq_source(url, key))
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert body["rows_imported"] == 5 and body["last_synced_at"] is not None
    got = await events(client, admin, "signed_up")
    assert [e["user_id"] for e in got] == ["u4", "u3", "u1", "u2", "u1"]
    assert got[0]["timestamp"] == "2024-03-04T10:00:00.000Z"
    assert got[0]["properties"] == {"id": 5, "plan": "free", "amount": 9.5,
                                    "created_at": "2024-03-04T10:00:00+00:00"}
    assert fake.unhandled == []
    # The first sync ran one query (plus the check's dry run) and read its later pages by page token.
    assert [q.get("dryRun", False) for q in fake.queries] == [True, False]

    # Incremental: rows from the stored cursor on (those already imported at it are skipped), asked for
    # with a typed TIMESTAMP parameter.
    add_signups(fake, (6, "u5", "pro", "2024-03-05T10:00:00Z"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(admin))).status == 202
    body = await wait_status(client, admin, created["id"], "active")
    assert body["rows_imported"] == 6
    got = await events(client, admin, "signed_up")
    assert len(got) == 6 and got[0]["user_id"] == "u5"
    last = fake.queries[-1]
    assert "WHERE `created_at` >= ?" in last["query"]
    assert last["queryParameters"][0]["parameterType"]["type"] == "TIMESTAMP"
    profile = await (await client.get("/v1/users/u1", headers=bearer(admin))).json()
    assert profile["event_count"] == 2
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert any(r.name.startswith("urllib3") for r in caplog.records)  # the client's transport logged, at debug
    assert key["private_key"].splitlines()[1] not in logged and key["private_key_id"] not in logged


async def test_bigquery_query_with_properties_mapping(client, make_key, bq):
    fake, url, key = bq
    add_signups(fake, (1, "u1", "free", "2024-03-01T10:00:00Z"), (2, "u2", "pro", "2024-03-02T10:00:00Z"))
    admin = await make_key("admin,read")
    query = "SELECT id, user_id AS account, plan FROM signups WHERE plan = 'pro'"
    source = bq_source(url, key, table=None, query=query, cursor_column="id", user_id_column="account",
                       properties={"tier": "plan"}, event_name="upgraded")
    del source["options"]["table"]
    created = await create(client, admin, source)
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    [event] = await events(client, admin, "upgraded")
    assert event["user_id"] == "u2" and event["properties"] == {"tier": "pro"}


@pytest.mark.parametrize("case", ["bad_key", "unreachable", "missing_table", "missing_column"])
async def test_bigquery_failures_end_in_error_with_a_reason(client, make_key, bq, case, caplog):
    _, url, key = bq
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")  # clickhouse-connect turns it down to WARNING
    source = bq_source(url, key)
    if case == "bad_key":  # a key Google never issued: its JWT signature does not verify
        source["credentials"]["service_account_key"], _ = new_service_account(f"{url}/token")
        secret = source["credentials"]["service_account_key"]["private_key"]
    else:
        secret = key["private_key"]
    if case == "unreachable":
        source["options"]["base_url"] = CLOSED
    if case == "missing_table":
        source["options"]["table"] = "orders"
    if case == "missing_column":
        source["options"]["cursor_column"] = "updated_at"
    admin = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", json=source, headers=bearer(admin))
    assert resp.status == 201 and secret not in await resp.text()
    body = await wait_status(client, admin, (await resp.json())["id"], "error")
    reason = body["status_reason"]
    expected = {
        "bad_key": "Google rejected the service account key: invalid_grant: Invalid JWT Signature.",
        "unreachable": "could not reach BigQuery at 127.0.0.1:1",
        "missing_table": "BigQuery answered HTTP 404: Not found: Table tally-test:analytics.orders was not found "
                         "in location US",
    }
    if case in expected:
        assert reason == expected[case]
    else:
        assert reason.startswith("BigQuery answered HTTP 400") and "updated_at" in reason
    assert body["last_synced_at"] is None
    assert await events(client, admin, "signed_up") == []
    lines = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "warehouse" in lines or "data source" in lines  # the run was logged...
    for part in (secret, secret.splitlines()[1]):  # ...without the key, whole or in part
        assert part not in lines and part not in str(body)
