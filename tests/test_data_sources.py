"""/v1/data-sources: scopes, validation per type, isolation, pagination, pause/resume, delete."""

from __future__ import annotations

import asyncio

import pytest

from app.crypto import CredentialBox
from app.sources.schedule import next_sync
from tests.conftest import bearer

CLOSED = "http://127.0.0.1:1"  # nothing listens on port 1: checks fail at once
# A pulled source whose peer is unreachable: the state machine's generic vehicle (segment sources are pushed
# to and never checked; tests/test_segment_api.py covers them).
UNREACHABLE = {"name": "seg", "type": "hubspot", "credentials": {"access_token": "hub-token-123"},
               "options": {"base_url": CLOSED}}


async def wait_status(client, key: str, source_id: str, *wanted: str, tries: int = 400) -> dict:
    """Poll GET /v1/data-sources/{id} (bounded) until its status is one of `wanted`."""
    body: dict = {}
    for _ in range(tries):
        resp = await client.get(f"/v1/data-sources/{source_id}", headers=bearer(key))
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        if body["status"] in wanted:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"source stayed {body.get('status')} ({body.get('status_reason')}), wanted {wanted}")


async def wait_idle(client) -> None:
    """Wait (bounded) until this process has no data-source run in progress."""
    from app.sources.runner import RUNNER

    for _ in range(400):
        if not client.app[RUNNER].running:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("background runs did not finish")


async def park_other_sources(pool, *source_ids: str) -> None:
    """Pause the sources of other workspaces that no run holds: tests share the database, and the scheduled
    job is not a workspace's, so an ended test's sources (due again once its runs were stopped) would take
    this test's slots."""
    await pool.execute(
        """UPDATE data_sources SET status = 'paused'
           WHERE workspace_id NOT IN (SELECT workspace_id FROM data_sources WHERE id = ANY($1))
             AND (lease_until IS NULL OR lease_until < now())""", list(source_ids))


async def run_job(client, pool, *source_ids: str) -> None:
    """Run the scheduled sync job once for these sources' workspaces, then wait for the runs it started (the
    job itself does not wait for them)."""
    from app.appkeys import SCHEDULER
    from app.sources.runner import JOB

    await park_other_sources(pool, *source_ids)
    assert await client.app[SCHEDULER].run_now(JOB)
    await wait_idle(client)


async def create(client, key: str, body: dict) -> dict:
    resp = await client.post("/v1/data-sources", json=body, headers=bearer(key))
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def test_create_returns_testing_then_check_failure_is_error(client, make_key):
    key = await make_key("admin,read")
    created = await create(client, key, UNREACHABLE)
    assert set(created) == {"id", "name", "type", "status", "created_at"}
    assert created["id"].startswith("src_") and created["status"] == "testing" and created["type"] == "hubspot"
    body = await wait_status(client, key, created["id"], "error")
    assert "could not reach HubSpot at http://127.0.0.1:1" in body["status_reason"]
    assert body["last_synced_at"] is None
    assert body["schedule"] == {"frequency": "daily", "time": "00:00"}
    assert "credentials" not in body


@pytest.mark.parametrize("scopes", ["read", "write", "read,write"])
async def test_admin_scope_required_to_connect_pause_and_remove(client, make_key, scopes):
    admin = await make_key("admin,read")
    created = await create(client, admin, UNREACHABLE)
    key = await make_key(scopes)
    resp = await client.post("/v1/data-sources", json=UNREACHABLE, headers=bearer(key))
    assert resp.status == 403 and (await resp.json())["error"]["code"] == "forbidden"
    for path in ("pause", "resume", "sync"):
        assert (await client.post(f"/v1/data-sources/{created['id']}/{path}", headers=bearer(key))).status == 403
    assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 403
    await wait_status(client, admin, created["id"], "error")


async def test_read_key_lists_and_gets(client, make_key):
    admin = await make_key("admin")
    created = await create(client, admin, UNREACHABLE)
    reader = await make_key("read")
    listed = await client.get("/v1/data-sources", headers=bearer(reader))
    assert listed.status == 200
    assert "X-RateLimit-Limit" in listed.headers
    [item] = (await listed.json())["data"]
    assert item["id"] == created["id"] and item["name"] == "seg"
    assert {"id", "name", "type", "status", "last_synced_at", "status_reason", "schedule"} <= set(item)
    await wait_status(client, reader, created["id"], "error")


async def test_other_workspace_and_env_see_404(client, make_key, workspace):
    live = await make_key("admin,read")
    created = await create(client, live, UNREACHABLE)
    test_env = await make_key("admin,read", test=True)
    other = await make_key("admin,read", workspace_name=workspace + "-other")
    for key in (test_env, other):
        assert (await client.get(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 404
        assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 404
        assert (await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(key))).status == 404
        assert (await (await client.get("/v1/data-sources", headers=bearer(key))).json())["data"] == []
    await wait_status(client, live, created["id"], "error")
    resp = await client.get("/v1/data-sources/src_nope", headers=bearer(live))
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"


SQL = {"host": "127.0.0.1", "database": "d", "username": "u", "password": "p"}
OK_KEY = {"client_email": "a@b.iam.gserviceaccount.com", "private_key": "-----BEGIN PRIVATE KEY-----"}


@pytest.mark.parametrize(("body", "field"), [
    ({"type": "postgres", "credentials": {k: v for k, v in SQL.items() if k != "host"}}, "credentials.host"),
    ({"type": "mysql", "credentials": {**SQL, "port": 70000}}, "credentials.port"),
    ({"type": "redshift", "credentials": {**SQL, "pasword": "typo"}}, "credentials.pasword"),
    ({"type": "bigquery", "credentials": {"project_id": "p", "dataset": "d"}}, "credentials.service_account_key"),
    ({"type": "bigquery", "credentials": {"project_id": "p", "dataset": "d", "service_account_key": {"x": 1}}},
     "credentials.service_account_key"),
    ({"type": "bigquery", "credentials": {"dataset": "d", "service_account_key": OK_KEY}}, "credentials.project_id"),
    ({"type": "snowflake", "credentials": {"account": "a", "database": "d", "username": "u", "password": "p"}},
     "credentials.warehouse"),
    ({"type": "stripe", "credentials": {}}, "credentials.api_key"),
    ({"type": "stripe", "credentials": {"api_key": "pk_live_abcdef"}}, "credentials.api_key"),
    ({"type": "hubspot", "credentials": {}}, "credentials.access_token"),
    ({"type": "salesforce", "credentials": {"client_id": "c", "refresh_token": "r"}}, "credentials.client_secret"),
    ({"type": "segment", "credentials": {"write_key": "short"}}, "credentials.write_key"),
    ({"type": "segment", "credentials": {"access_token": "a-public-api-token"}}, "credentials.access_token"),
    ({"type": "oracle", "credentials": {}}, "type"),
    ({"type": "postgres"}, "credentials"),
    ({"type": "postgres", "credentials": SQL, "schedule": {"frequency": "daily", "time": "25:00"}}, "schedule.time"),
    # A final line break is no part of a time, key or name (a regex's `$` let it through).
    ({"type": "postgres", "credentials": SQL, "schedule": {"frequency": "daily", "time": "06:30\n"}},
     "schedule.time"),
    ({"type": "stripe", "credentials": {"api_key": "sk_test_abcdef\n"}}, "credentials.api_key"),
    ({"type": "segment", "credentials": {"write_key": "a-write-key\n"}}, "credentials.write_key"),
    ({"type": "postgres", "credentials": SQL, "options": {"table": "events\n"}}, "options.table"),
    ({"type": "postgres", "credentials": SQL, "options": {"properties": {"plan": "plan\n"}}},
     "options.properties[...]"),
    ({"type": "postgres", "credentials": SQL, "schedule": {"frequency": "monthly"}}, "schedule.frequency"),
    ({"type": "postgres", "credentials": SQL, "options": {"table": "t; drop table x"}}, "options.table"),
    ({"type": "postgres", "credentials": SQL, "options": {"table": "t", "query": "select 1"}}, "options.query"),
    ({"type": "postgres", "credentials": SQL, "options": {"event_name": "Bad Name"}}, "options.event_name"),
    ({"type": "stripe", "credentials": {"api_key": "sk_test_abcdef"}, "options": {"table": "t"}}, "options.table"),
    ({"type": "hubspot", "credentials": {"access_token": "tok"}, "options": {"query": "select 1"}}, "options.table"),
    ({"type": "postgres", "credentials": SQL, "options": {"properties": {"plan": "bad col"}}},
     "options.properties[...]"),
    ({"type": "salesforce", "credentials": {"access_token": "tok"}, "options": {"table": "Account"}},
     "credentials.instance_url"),
    # A user name and password in the URL: the connectors send their own Authorization header, which
    # aiohttp refuses beside URL credentials ("unexpected ValueError while syncing" before).
    ({"type": "stripe", "credentials": {"api_key": "sk_test_abcdef"},
      "options": {"base_url": "http://user:pw@api.example.com"}}, "options.base_url"),
    ({"type": "salesforce", "credentials": {"access_token": "tok", "instance_url": "https://u@acme.example.com"},
      "options": {"table": "Account"}}, "credentials.instance_url"),
    # A URL that matches the pattern but names no usable host and port: accepted before, the source then
    # ended in error with "unexpected ValueError while syncing" (or could not reach port 99999).
    ({"type": "stripe", "credentials": {"api_key": "sk_test_abcdef"}, "options": {"base_url": "http://[::1"}},
     "options.base_url"),
    ({"type": "hubspot", "credentials": {"access_token": "tok"}, "options": {"base_url": "http://h:99999"}},
     "options.base_url"),
    ({"type": "hubspot", "credentials": {"access_token": "tok"}, "options": {"base_url": "http://h:0/"}},
     "options.base_url"),
    ({"type": "stripe", "credentials": {"api_key": "sk_test_abcdef"}, "options": {"base_url": "http://h:x/"}},
     "options.base_url"),
    ({"type": "salesforce", "credentials": {"access_token": "tok", "instance_url": "https://[zz]"},
      "options": {"table": "Account"}}, "credentials.instance_url"),
    # A host is a name or an address: a URL (a whole DSN, password included) was stored and echoed in the
    # source's status_reason and the logs ("could not connect to postgres://app:S3cretPw99@db…:5432").
    ({"type": "postgres", "credentials": {**SQL, "host": "postgres://app:S3cretPw99@db.example.com:5432/prod"}},
     "credentials.host"),
    ({"type": "mysql", "credentials": {**SQL, "host": "db.example.com:3306"}}, "credentials.host"),
    ({"type": "redshift", "credentials": {**SQL, "host": "db .example.com"}}, "credentials.host"),
    ({"type": "postgres", "credentials": {**SQL, "host": "x" * 254}}, "credentials.host"),
    # U+0000, which the jsonb of options cannot hold (a 500 before) and no peer takes in a credential.
    ({"type": "postgres", "credentials": SQL, "options": {"query": "select '\u0000'"}}, "options.query"),
    ({"type": "hubspot", "credentials": {"access_token": "tok"}, "options": {"base_url": "http://h/a\u0000"}},
     "options.base_url"),
    ({"type": "postgres", "credentials": SQL, "options": {"table": "t", "properties": {"a\u0000b": "col"}}},
     "options.properties.'a\\x00b'"),
    ({"type": "postgres", "credentials": {**SQL, "host": "db\u0000.example.com"}}, "credentials.host"),
])
async def test_validation_names_the_field(client, make_key, body, field):
    key = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", json={"name": "x", **body}, headers=bearer(key))
    assert resp.status == 400, await resp.text()
    assert "S3cretPw99" not in await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"][0]["field"] == field, error
    assert (await (await client.get("/v1/data-sources", headers=bearer(key))).json())["data"] == []


async def test_missing_name_and_bad_json(client, make_key):
    key = await make_key("admin")
    resp = await client.post("/v1/data-sources", json={"type": "segment", "credentials": {"access_token": "abcd"}},
                             headers=bearer(key))
    assert resp.status == 400 and "name" in (await resp.json())["error"]["message"]
    resp = await client.post("/v1/data-sources", data=b"{", headers={**bearer(key), "Content-Type": "application/json"})
    assert resp.status == 400


@pytest.mark.parametrize("name", ["", " ", "   ", "\t\n", "\u3000"])
async def test_a_blank_name_is_refused_and_nothing_is_created(client, make_key, name):
    """A name of nothing but whitespace names nothing in the list: 400 naming the field, no source created
    (and no check started)."""
    key = await make_key("admin,read")
    for body in (UNREACHABLE, {"type": "segment", "credentials": {}}):
        resp = await client.post("/v1/data-sources", json={**body, "name": name}, headers=bearer(key))
        assert resp.status == 400, await resp.text()
        error = (await resp.json())["error"]
        assert error["code"] == "invalid_request" and error["fields"][0]["field"] == "name", error
    assert (await (await client.get("/v1/data-sources", headers=bearer(key))).json())["data"] == []


async def test_a_name_with_spaces_around_is_kept_as_sent(client, make_key):
    """As dashboards' and reports' names are: spaces around a name are the caller's, not trimmed."""
    key = await make_key("admin,read")
    created = await create(client, key, {**UNREACHABLE, "name": "  crm export "})
    assert created["name"] == "  crm export "
    body = await wait_status(client, key, created["id"], "error")
    assert body["name"] == "  crm export "


async def test_pagination(client, make_key):
    key = await make_key("admin,read")
    ids = [(await create(client, key, {**UNREACHABLE, "name": f"s{i}"}))["id"] for i in range(3)]
    first = await (await client.get("/v1/data-sources?limit=2", headers=bearer(key))).json()
    assert [s["id"] for s in first["data"]] == ids[:2] and first["has_more"] is True
    second = await (await client.get(f"/v1/data-sources?limit=2&cursor={first['next_cursor']}",
                                     headers=bearer(key))).json()
    assert [s["id"] for s in second["data"]] == ids[2:]
    assert second["has_more"] is False and second["next_cursor"] is None
    assert (await client.get("/v1/data-sources?cursor=@@", headers=bearer(key))).status == 400
    assert (await client.get("/v1/data-sources?limit=0", headers=bearer(key))).status == 400
    for source_id in ids:
        await wait_status(client, key, source_id, "error")


async def test_pause_resume_and_sync_conflicts(client, make_key):
    key = await make_key("admin,read")
    created = await create(client, key, {**UNREACHABLE, "schedule": {"frequency": "weekly", "time": "06:30"}})
    await wait_status(client, key, created["id"], "error")
    paused = await client.post(f"/v1/data-sources/{created['id']}/pause", headers=bearer(key))
    assert paused.status == 200 and (await paused.json())["status"] == "paused"
    resp = await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))
    assert resp.status == 409 and (await resp.json())["error"]["code"] == "conflict"
    resumed = await (await client.post(f"/v1/data-sources/{created['id']}/resume", headers=bearer(key))).json()
    assert resumed["status"] == "active"
    assert resumed["schedule"] == {"frequency": "weekly", "time": "06:30"}
    assert resumed["next_sync_at"].endswith("06:30:00.000Z")
    # A manual sync of the (still unreachable) source runs and fails again.
    resp = await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(key))
    assert resp.status == 202 and (await resp.json())["status"] == "syncing"
    body = await wait_status(client, key, created["id"], "error")
    assert "HubSpot" in body["status_reason"]


async def test_delete_is_204_then_404(client, make_key):
    key = await make_key("admin,read")
    created = await create(client, key, UNREACHABLE)
    await wait_status(client, key, created["id"], "error")
    resp = await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))
    assert resp.status == 204 and await resp.read() == b""
    assert (await client.get(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 404
    assert (await client.delete(f"/v1/data-sources/{created['id']}", headers=bearer(key))).status == 404


def test_schedule_next_sync():
    from datetime import UTC, datetime

    at = datetime(2024, 5, 15, 10, 20, tzinfo=UTC)  # a Wednesday
    assert next_sync("hourly", "00:00", at) == datetime(2024, 5, 15, 11, 0, tzinfo=UTC)
    assert next_sync("daily", "09:00", at) == datetime(2024, 5, 16, 9, 0, tzinfo=UTC)
    assert next_sync("daily", "23:15", at) == datetime(2024, 5, 15, 23, 15, tzinfo=UTC)
    assert next_sync("weekly", "09:00", at) == datetime(2024, 5, 20, 9, 0, tzinfo=UTC)
    assert next_sync("weekly", "09:00", datetime(2024, 5, 20, 8, 0, tzinfo=UTC)) == datetime(2024, 5, 20, 9, 0,
                                                                                              tzinfo=UTC)


def test_credential_box_binds_the_source_id():
    box = CredentialBox("s" * 40)
    sealed = box.seal(b'{"password":"pw"}', "src_1")
    assert b"pw" not in sealed and box.open(sealed, "src_1") == b'{"password":"pw"}'
    with pytest.raises(Exception):  # noqa: B017 - cryptography raises InvalidTag
        box.open(sealed, "src_2")
    with pytest.raises(Exception):  # noqa: B017
        CredentialBox("t" * 40).open(sealed, "src_1")
