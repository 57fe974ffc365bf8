"""Retention accepts the spec's generic config.events ([start_event, return_event]) as well as
start_event/return_event, runs the same either way, and echoes the config in the form it was sent."""

from __future__ import annotations

import pytest

from tests.conftest import bearer
from tests.test_reports_support import create_report, run_report, seed, workspace_id

D1, D2 = "2024-03-01T00:00:00.000Z", "2024-03-02T00:00:00.000Z"
RANGE = {"from": "2024-03-01T00:00:00Z", "to": "2024-03-02T23:59:59Z"}


async def test_events_form_runs_like_the_named_form_and_is_echoed_as_sent(client, make_key, pool, workspace,
                                                                          database_url):
    key = await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    await seed(pool, ws, [
        ("signup", "u1", "2024-03-01T10:00:00Z"), ("login", "u1", "2024-03-02T08:00:00Z"),
        ("signup", "u2", "2024-03-01T11:00:00Z"),
        ("signup", "u3", "2024-03-02T10:00:00Z"), ("login", "u3", "2024-03-03T10:00:00Z"),
    ])
    by_events = await create_report(client, key, {"name": "R", "type": "retention", "config": {
        "events": ["signup", "login"], "periods": 2, **RANGE}})
    assert by_events["config"] == {"events": ["signup", "login"], "periods": 2, "period": "day", **RANGE}
    by_name = await create_report(client, key, {"name": "R", "type": "retention", "config": {
        "start_event": "signup", "return_event": "login", "periods": 2, **RANGE}})
    assert by_name["config"] == {"start_event": "signup", "return_event": "login", "periods": 2, "period": "day",
                                 **RANGE}
    fetched = await (await client.get(f"/v1/reports/{by_events['id']}", headers=bearer(key))).json()
    assert fetched["config"] == by_events["config"]
    first, second = await run_report(client, key, by_events["id"]), await run_report(client, key, by_name["id"])
    assert first["columns"] == second["columns"] == ["cohort", "users", "day_1", "day_2"]
    assert first["rows"] == second["rows"] == [[D1, 2, 0.5, 0.0], [D2, 1, 1.0, 0.0]]
    # Swapping the order swaps the roles.
    swapped = await create_report(client, key, {"name": "R", "type": "retention", "config": {
        "events": ["login", "signup"], "periods": 2, **RANGE}})
    assert (await run_report(client, key, swapped["id"]))["rows"] == [[D2, 1, 0.0, 0.0]]
    # PATCH to the events form keeps that form.
    resp = await client.patch(f"/v1/reports/{by_name['id']}", headers=bearer(key),
                              json={"config": {"events": ["signup", "login"]}})
    assert resp.status == 200
    assert (await resp.json())["config"] == {"events": ["signup", "login"], "period": "day", "periods": 8,
                                             "from": None, "to": None}


@pytest.mark.parametrize(("config", "field"), [
    ({"events": ["signup"]}, "config.events"),
    ({"events": ["signup", "login", "buy"]}, "config.events"),
    ({"events": ["signup", "Log In"]}, "config.events[1]"),
    ({"events": ["signup", "login"], "start_event": "signup"}, "config.events"),
    ({"return_event": "login"}, "config.start_event"),
    ({}, "config.start_event"),
])
async def test_bad_retention_configs_name_the_field(client, make_key, config, field):
    key = await make_key("read,write")
    resp = await client.post("/v1/reports", headers=bearer(key),
                             json={"name": "R", "type": "retention", "config": config})
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]["fields"][0]["field"] == field
    assert (await (await client.get("/v1/reports", headers=bearer(key))).json())["data"] == []
