"""/v1/reports: CRUD, scopes, validation, pagination, workspace/env isolation, run and timeout."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from tests.conftest import bearer
from tests.reports_support import create_report, run_report, seed, workspace_id

VOLUME = {"name": "Signups", "type": "event_volume",
          "config": {"events": ["signup"], "from": "2024-03-01T00:00:00Z", "to": "2024-03-02T00:00:00Z"}}


async def test_create_returns_201_with_the_report(client, make_key):
    key = await make_key("read,write")
    body = await create_report(client, key, {
        **VOLUME, "schedule": {"frequency": "weekly", "recipients": ["a@example.com"], "format": "pdf"}})
    assert body["id"].startswith("rpt_")
    assert body["name"] == "Signups" and body["type"] == "event_volume"
    assert body["config"] == {"events": ["signup"], "from": "2024-03-01T00:00:00Z", "to": "2024-03-02T00:00:00Z",
                              "interval": "day", "group_by": None, "group_limit": 50}
    assert body["schedule"] == {"frequency": "weekly", "recipients": ["a@example.com"], "format": "pdf"}
    assert body["created_at"].endswith("Z")
    assert body["last_run_at"] is None


async def test_config_bounds_come_back_in_utc_as_every_timestamp_of_the_api(client, make_key):
    """The spec's timestamps are ISO 8601 in UTC; a config's from/to came back in the offset they were sent
    with and with microseconds (`2026-11-22T10:00:00.500000-05:30`). They are the same instants in UTC with
    Z, a fraction only when there is one (milliseconds, finer digits kept), also after a change of config."""
    key = await make_key("read,write")
    body = await create_report(client, key, {**VOLUME, "config": {
        "events": ["signup"], "from": "2024-03-01T02:00:00+02:00", "to": "2024-03-02T10:00:00.5-05:30"}})
    assert (body["config"]["from"], body["config"]["to"]) == ("2024-03-01T00:00:00Z", "2024-03-02T15:30:00.500Z")
    patched = await (await client.patch(f"/v1/reports/{body['id']}", headers=bearer(key), json={"config": {
        "events": ["signup"], "from": "2024-03-01T00:00:00.000001+00:00", "to": "2024-03-02T23:59:59.999Z"}})).json()
    assert (patched["config"]["from"], patched["config"]["to"]) == ("2024-03-01T00:00:00.000001Z",
                                                                  "2024-03-02T23:59:59.999Z")
    retention = await create_report(client, key, {"name": "r", "type": "retention", "config": {
        "events": ["a", "b"], "from": "2024-03-01T01:00:00+01:00"}})
    assert retention["config"]["from"] == "2024-03-01T00:00:00Z"
    assert (await (await client.get(f"/v1/reports/{body['id']}", headers=bearer(key))).json())["config"] == \
        patched["config"]


@pytest.mark.parametrize(("body", "field"), [
    ({"type": "funnel", "config": {"events": ["a", "b"]}}, "name"),
    ({"name": "x", "type": "pie", "config": {}}, "type"),
    ({"name": "x", "type": "event_volume", "config": {"events": ["Not Snake"]}}, "config.events[0]"),
    # Python's $ matched before a final newline, so this name was taken and counted nothing.
    ({"name": "x", "type": "event_volume", "config": {"events": ["signup\n"]}}, "config.events[0]"),
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "interval": "minute"}}, "config.interval"),
    ({"name": "x", "type": "funnel", "config": {"events": ["a"]}}, "config.events"),
    ({"name": "x", "type": "funnel", "config": {"events": ["a", "b"], "conversion_window_days": 0}},
     "config.conversion_window_days"),
    ({"name": "x", "type": "funnel", "config": {"events": ["a", "b"], "from": "2024-02-01T00:00:00Z",
                                                "to": "2024-01-01T00:00:00Z"}}, "config.from"),
    ({"name": "x", "type": "retention", "config": {"start_event": "a"}}, "config.return_event"),
    ({"name": "x", "type": "retention", "config": {"start_event": "a", "return_event": "b", "typo": 1}},
     "config.typo"),
    ({"name": "x", "type": "retention", "config": {"start_event": "a", "return_event": "b", "period": "year"}},
     "config.period"),
    # A string where a number goes is refused, as everywhere else in the API, not read as the number.
    ({"name": "x", "type": "funnel", "config": {"events": ["a", "b"], "conversion_window_days": "7"}},
     "config.conversion_window_days"),
    ({"name": "x", "type": "retention", "config": {"events": ["a", "b"], "periods": "8"}}, "config.periods"),
    # A group_by with an empty key would group by nothing and put every event under null.
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "group_by": "traits."}}, "config.group_by"),
    ({"name": "x", "type": "funnel", "config": {"events": ["a", "b"], "group_by": "properties."}},
     "config.group_by"),
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "group_by": "plan..tier"}}, "config.group_by"),
    # Spaces inside a name are a name ("Plan Type"); around it, a typo that would group everything under null.
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "group_by": "traits.plan "}}, "config.group_by"),
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "group_by": "traits. plan"}}, "config.group_by"),
    ({**VOLUME, "schedule": {"frequency": "hourly", "recipients": ["a@example.com"]}}, "schedule.frequency"),
    ({**VOLUME, "schedule": {"frequency": "daily", "recipients": ["not-an-email"]}}, "schedule.recipients[0]"),
    # An address at an IP address would have Tally's mail server connect wherever a tenant says, internal
    # networks included (security walk-through): recipients are at domain names.
    *[({**VOLUME, "schedule": {"frequency": "daily", "recipients": ["a@example.com", to]}}, "schedule.recipients[1]")
      for to in ("ops@[127.0.0.1]", "ops@[10.0.0.5]", "ops@127.0.0.1", "ops@169.254.169.254", "ops@[IPv6:::1]")],
    ({**VOLUME, "schedule": {"frequency": "daily", "recipients": ["a@example.com"], "format": "xlsx"}},
     "schedule.format"),
    # A final line break is no part of an address or a property path (a regex's `$` let it through).
    ({**VOLUME, "schedule": {"frequency": "daily", "recipients": ["ops@example.com\n"]}}, "schedule.recipients[0]"),
    ({"name": "x", "type": "event_volume", "config": {"events": ["a"], "group_by": "traits.plan\n"}},
     "config.group_by"),
    # A blank name listed as an empty row; an unknown key is named (the field was "").
    ({**VOLUME, "name": " \u3000 "}, "name"),
    ({**VOLUME, "colour": "red"}, "colour"),
])
async def test_invalid_bodies_are_400_naming_the_field(client, make_key, body, field):
    key = await make_key("write")
    error = (await create_report(client, key, body, status=400))["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"][0]["field"] == field, error


async def test_recipients_at_domain_names_are_kept(client, make_key):
    key = await make_key("read,write")
    recipients = ["a@example.com", "b@mail.example.co.uk", "c@xn--e1afmkfd.xn--p1ai", "d@пример.рф", "e@10x.example"]
    report = await create_report(client, key, {**VOLUME, "schedule": {"frequency": "daily", "recipients": recipients}})
    assert report["schedule"]["recipients"] == recipients


async def test_scopes(client, make_key):
    read, write = await make_key("read"), await make_key("write")
    report = await create_report(client, write, VOLUME)
    rid = report["id"]
    assert (await client.post("/v1/reports", json=VOLUME, headers=bearer(read))).status == 403
    assert (await client.get("/v1/reports", headers=bearer(write))).status == 403
    assert (await client.get("/v1/reports", headers=bearer(read))).status == 200
    assert (await client.get(f"/v1/reports/{rid}/run", headers=bearer(write))).status == 403
    assert (await client.get(f"/v1/reports/{rid}/run", headers=bearer(read))).status == 200
    for method in ("patch", "delete"):
        resp = await client.request(method, f"/v1/reports/{rid}", json={}, headers=bearer(read))
        assert resp.status == 403, method
        assert (await resp.json())["error"]["code"] == "forbidden"
    # Reading a report's definition is a read, like listing it.
    assert (await client.get(f"/v1/reports/{rid}", headers=bearer(read))).status == 200
    resp = await client.get(f"/v1/reports/{rid}", headers=bearer(write))
    assert resp.status == 403
    assert (await resp.json())["error"]["message"] == "this key lacks the 'read' scope"
    assert (await client.get("/v1/reports")).status == 401


async def test_list_paginates_newest_first(client, make_key):
    key = await make_key("read,write")
    ids = [(await create_report(client, key, {**VOLUME, "name": f"r{i}"}))["id"] for i in range(3)]
    resp = await client.get("/v1/reports?limit=2", headers=bearer(key))
    page = await resp.json()
    assert [r["id"] for r in page["data"]] == [ids[2], ids[1]]
    assert page["has_more"] is True and page["next_cursor"]
    assert set(page["data"][0]) == {"id", "name", "type", "created_at", "last_run_at"}
    resp = await client.get(f"/v1/reports?limit=2&cursor={page['next_cursor']}", headers=bearer(key))
    page = await resp.json()
    assert [r["id"] for r in page["data"]] == [ids[0]]
    assert page["has_more"] is False and page["next_cursor"] is None
    assert (await client.get("/v1/reports?cursor=bogus", headers=bearer(key))).status == 400
    assert (await client.get("/v1/reports?limit=0", headers=bearer(key))).status == 400


async def test_get_patch_delete(client, make_key):
    key = await make_key("read,write")
    rid = (await create_report(client, key, VOLUME))["id"]
    got = await (await client.get(f"/v1/reports/{rid}", headers=bearer(key))).json()
    assert got["name"] == "Signups" and got["schedule"] is None

    resp = await client.patch(f"/v1/reports/{rid}", headers=bearer(key), json={
        "name": "Renamed", "config": {"events": ["login"], "interval": "hour"},
        "schedule": {"frequency": "daily", "recipients": ["ops@example.com"]}})
    assert resp.status == 200, await resp.text()
    patched = await resp.json()
    assert patched["name"] == "Renamed"
    assert patched["config"]["events"] == ["login"] and patched["config"]["interval"] == "hour"
    assert patched["schedule"] == {"frequency": "daily", "recipients": ["ops@example.com"], "format": "csv"}

    resp = await client.patch(f"/v1/reports/{rid}", headers=bearer(key), json={"schedule": None})
    assert (await resp.json())["schedule"] is None
    resp = await client.patch(f"/v1/reports/{rid}", headers=bearer(key), json={"type": "funnel"})
    assert resp.status == 400  # the stored config has one event; a funnel needs two
    assert (await resp.json())["error"]["fields"][0]["field"] == "config.events"

    resp = await client.delete(f"/v1/reports/{rid}", headers=bearer(key))
    assert resp.status == 204 and await resp.read() == b""
    assert (await client.get(f"/v1/reports/{rid}", headers=bearer(key))).status == 404
    assert (await client.delete(f"/v1/reports/{rid}", headers=bearer(key))).status == 404


async def test_other_workspace_and_env_get_404(client, make_key, workspace):
    live = await make_key("read,write")
    test_env = await make_key("read,write", test=True)
    stranger = await make_key("read,write", workspace_name=f"{workspace}-other")
    rid = (await create_report(client, live, VOLUME))["id"]
    for key in (test_env, stranger):
        for method, path in (("get", ""), ("patch", ""), ("delete", ""), ("get", "/run")):
            resp = await client.request(method, f"/v1/reports/{rid}{path}", json={"name": "x"}, headers=bearer(key))
            assert resp.status == 404, (method, path)
            assert (await resp.json())["error"]["code"] == "not_found"
        assert (await (await client.get("/v1/reports", headers=bearer(key))).json())["data"] == []
    assert (await client.get(f"/v1/reports/{rid}", headers=bearer(live))).status == 200


async def test_run_sets_last_run_at(client, make_key, pool, workspace, database_url):
    key = await make_key("read,write")
    await seed(pool, await workspace_id(database_url, workspace), [("signup", "u1", "2024-03-01T05:00:00Z")])
    rid = (await create_report(client, key, VOLUME))["id"]
    result = await run_report(client, key, rid)
    assert result["rows"] == [["2024-03-01T00:00:00.000Z", "signup", 1], ["2024-03-02T00:00:00.000Z", "signup", 0]]
    got = await (await client.get(f"/v1/reports/{rid}", headers=bearer(key))).json()
    assert got["last_run_at"] == result["generated_at"]
    listed = await (await client.get("/v1/reports", headers=bearer(key))).json()
    assert listed["data"][0]["last_run_at"] == result["generated_at"]


async def test_custom_needs_the_enterprise_plan(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/reports", headers=bearer(key),
                             json={"name": "SQL", "type": "custom", "config": {"sql": "SELECT 1"}})
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "plan_required"


async def test_a_run_whose_wait_for_the_mirror_takes_the_timeout_says_so(make_client, settings, make_key,
                                                                          database_url):
    """A run waits for the analytics store to hold what was committed before it; that wait, not the report,
    took the whole timeout (here the mirror is blocked on the outbox; after an upgrade, a backlog of millions of
    events): a 503 saying the store is catching up, with Retry-After. It said "narrow the date range", which
    cannot help (upgrade walk-through)."""
    client = await make_client(dataclasses.replace(settings, report_timeout_seconds=0.3))
    key = await make_key("read,write")
    rid = (await create_report(client, key, VOLUME))["id"]
    blocker = await asyncpg.connect(database_url)
    try:
        async with blocker.transaction():
            await blocker.execute("LOCK TABLE analytics_outbox IN ACCESS EXCLUSIVE MODE")
            resp = await client.get(f"/v1/reports/{rid}/run", headers=bearer(key))
    finally:
        await blocker.close()
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "10"
    error = (await resp.json())["error"]
    assert error["code"] == "unavailable"
    assert error["message"].startswith("the analytics store is still mirroring events committed before this request")
    assert "narrow" not in error["message"]
    got = await (await client.get(f"/v1/reports/{rid}", headers=bearer(key))).json()
    assert got["last_run_at"] is None


async def test_write_only_key_cannot_schedule_mailed_results(client, make_key, database_url):
    """A schedule mails results to any address: a write-only key saving one could read event data."""
    write, both = await make_key("write"), await make_key("read,write")
    scheduled = {**VOLUME, "schedule": {"frequency": "daily", "recipients": ["me@attacker.example"]}}
    resp = await client.post("/v1/reports", json=scheduled, headers=bearer(write))
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "forbidden"
    plain = await create_report(client, write, VOLUME)  # saving an unscheduled report stays a write
    resp = await client.patch(f"/v1/reports/{plain['id']}", json={"schedule": scheduled["schedule"]},
                              headers=bearer(write))
    assert resp.status == 403
    mailed = await create_report(client, both, scheduled)
    resp = await client.patch(f"/v1/reports/{mailed['id']}", json={"config": {"events": ["login"]}},
                              headers=bearer(write))
    assert resp.status == 403
    assert (await client.patch(f"/v1/reports/{mailed['id']}", json={"schedule": None},
                               headers=bearer(write))).status == 200  # stopping the mail is fine
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, config, schedule FROM reports WHERE id = ANY($1::text[])",
                                [plain["id"], mailed["id"]])
    finally:
        await conn.close()
    assert all(r["schedule"] is None for r in rows)
    assert all("login" not in str(r["config"]) for r in rows)


@pytest.mark.parametrize("field", ["name", "type", "config"])
async def test_patch_with_a_required_field_null_is_400_and_changes_nothing(client, make_key, field):
    """null does not mean "leave it": a required field cannot be cleared, so null is refused naming the field
    (it was silently ignored). Only schedule takes null, to remove the schedule."""
    key = await make_key("read,write")
    report = await create_report(client, key, {
        **VOLUME, "schedule": {"frequency": "daily", "recipients": ["ops@example.com"]}})
    resp = await client.patch(f"/v1/reports/{report['id']}", headers=bearer(key), json={field: None})
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request" and error["fields"][0]["field"] == field
    after = await (await client.get(f"/v1/reports/{report['id']}", headers=bearer(key))).json()
    assert after == report


async def test_a_blank_name_on_patch_is_400_and_changes_nothing(client, make_key):
    key = await make_key("read,write")
    report = await create_report(client, key, {**VOLUME, "name": " padded "})
    assert report["name"] == " padded "
    resp = await client.patch(f"/v1/reports/{report['id']}", headers=bearer(key), json={"name": "\t"})
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == "name"
    assert await (await client.get(f"/v1/reports/{report['id']}", headers=bearer(key))).json() == report


async def test_head_on_run_checks_access_and_runs_nothing(client, make_key):
    """aiohttp answers HEAD with the GET handler: a probe ran the whole report and stamped last_run_at."""
    key = await make_key("read,write")
    report = await create_report(client, key, VOLUME)
    resp = await client.head(f"/v1/reports/{report['id']}/run", headers=bearer(key))
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/json")
    assert (await client.head("/v1/reports/rpt_nope/run", headers=bearer(key))).status == 404
    assert (await client.head(f"/v1/reports/{report['id']}/run", headers=bearer(await make_key("write")))).status == 403
    after = await (await client.get(f"/v1/reports/{report['id']}", headers=bearer(key))).json()
    assert after["last_run_at"] is None
    await run_report(client, key, report["id"])
    after = await (await client.get(f"/v1/reports/{report['id']}", headers=bearer(key))).json()
    assert after["last_run_at"] is not None


def _days_ago(days: int) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="seconds").replace("+00:00", "Z")


async def test_an_hourly_report_open_to_now_past_the_bucket_cap_is_400_naming_from(client, make_key, pool):
    """Without `to` the range runs to now and grows each day: an hourly report with a fixed `from` passes
    10,000 buckets after about 416 days. Creating one already past it, and running one that has grown past
    it, is a 400 naming config.from (it named config.interval, whose change is not the only remedy)."""
    key = await make_key("read,write")
    hourly = {"name": "Hourly", "type": "event_volume", "config": {"events": ["signup"], "interval": "hour"}}
    error = (await create_report(client, key, {
        **hourly, "config": {**hourly["config"], "from": _days_ago(420)}}, status=400))["error"]
    assert error["fields"][0]["field"] == "config.from", error
    assert "to defaults to now" in error["message"]
    # Both bounds given: the range is fixed, the interval is what to change.
    error = (await create_report(client, key, {**hourly, "config": {
        **hourly["config"], "from": "2020-01-01T00:00:00Z", "to": "2022-01-01T00:00:00Z"}}, status=400))["error"]
    assert error["fields"][0]["field"] == "config.interval"

    report = await create_report(client, key, {**hourly, "config": {**hourly["config"], "from": _days_ago(400)}})
    async with pool.acquire() as conn:  # the days pass
        await conn.execute("UPDATE reports SET config = jsonb_set(config, '{from}', to_jsonb($2::text)) WHERE id = $1",
                           report["id"], _days_ago(420))
    error = (await run_report(client, key, report["id"], status=400))["error"]
    assert error["code"] == "invalid_request" and error["fields"][0]["field"] == "config.from"
    assert (await (await client.get(f"/v1/reports/{report['id']}", headers=bearer(key))).json())["last_run_at"] is None


async def test_a_report_grown_past_the_bucket_cap_can_still_be_renamed(client, make_key, pool):
    """PATCH re-checks the config only when the config or the type changes: a report whose range to now has
    grown past the cap keeps its config and takes a new name (it answered 400 on config.from), while a
    config change is still checked."""
    key = await make_key("read,write")
    report = await create_report(client, key, {"name": "Hourly", "type": "event_volume", "config": {
        "events": ["signup"], "interval": "hour", "from": _days_ago(400)}})
    async with pool.acquire() as conn:  # the days pass
        await conn.execute("UPDATE reports SET config = jsonb_set(config, '{from}', to_jsonb($2::text)) WHERE id = $1",
                           report["id"], _days_ago(420))
        stored = await conn.fetchval("SELECT config FROM reports WHERE id = $1", report["id"])
    resp = await client.patch(f"/v1/reports/{report['id']}", json={"name": "Hourly, old"}, headers=bearer(key))
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["name"] == "Hourly, old" and body["config"]["from"] == stored["from"]
    resp = await client.patch(f"/v1/reports/{report['id']}", headers=bearer(key), json={
        "config": {**stored, "interval": "hour"}})
    assert resp.status == 400 and (await resp.json())["error"]["fields"][0]["field"] == "config.from"
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT name FROM reports WHERE id = $1", report["id"]) == "Hourly, old"


@pytest.mark.parametrize("group_by", ["Plan Type", "properties.Plan Type", "traits.Plan Type"])
async def test_group_by_takes_a_property_or_trait_name_with_spaces(client, make_key, group_by):
    """Property and trait names are free-form, and names like "Plan Type" are common (Mixpanel's style): a
    dashboard chart groups by one, and so does a report (its group_by was refused with a 400)."""
    key = await make_key("read,write")
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "ada", "traits": {"Plan Type": "Pro"}})
    await client.post("/v1/identify", headers=bearer(key), json={"user_id": "bo", "traits": {"Plan Type": "Free"}})
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "signup", "user_id": "ada", "properties": {"Plan Type": "Pro"}, "timestamp": "2026-10-23T10:00Z"},
        {"event": "signup", "user_id": "bo", "properties": {"Plan Type": "Free"}, "timestamp": "2026-10-23T11:00Z"}]})
    report = await create_report(client, key, {"name": "By plan", "type": "event_volume", "config": {
        "events": ["signup"], "from": "2026-10-23", "to": "2026-10-23T23:00:00Z", "group_by": group_by}})
    assert report["config"]["group_by"] == group_by
    result = await run_report(client, key, report["id"])
    assert result["columns"] == ["bucket", "event", group_by, "count"]
    assert sorted((row[2], row[3]) for row in result["rows"]) == [("Free", 1), ("Pro", 1)]
