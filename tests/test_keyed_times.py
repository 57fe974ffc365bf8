"""Timestamps on the keyed API: an inclusive `to` matches the event listed at that time (events keep
microseconds, the API writes milliseconds), in GET /v1/events, reports and chart data alike."""

from __future__ import annotations

import pytest

from tests.conftest import bearer
from tests.reports_support import create_report, run_report

STORED = "2025-06-01T12:00:00.123456Z"  # kept to the microsecond
LISTED = "2025-06-01T12:00:00.123Z"  # as the API writes it


@pytest.fixture
async def key(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "precision", "user_id": "prec", "timestamp": STORED})
    assert resp.status == 200
    return key


async def _listed(client, key, **bounds) -> list[str]:
    resp = await client.get("/v1/events", headers=bearer(key), params={"event": "precision", **bounds})
    assert resp.status == 200, await resp.text()
    return [e["timestamp"] for e in (await resp.json())["data"]]


async def test_to_matches_the_event_listed_at_it(client, key):
    assert await _listed(client, key) == [LISTED]
    assert await _listed(client, key, to=LISTED) == [LISTED]
    assert await _listed(client, key, **{"from": LISTED, "to": LISTED}) == [LISTED]
    assert await _listed(client, key, to="2025-06-01T14:00:00.123+02:00") == [LISTED]
    assert await _listed(client, key, to="2025-06-01T12:00:00.122Z") == []
    # A `to` with finer digits than the millisecond is exact.
    assert await _listed(client, key, to="2025-06-01T12:00:00.123455Z") == []
    assert await _listed(client, key, to="2025-06-01T12:00:00.123456Z") == [LISTED]


async def _report_count(client, key, type_: str, config: dict) -> int:
    report = await create_report(client, key, {"name": "p", "type": type_, "config": config})
    result = await run_report(client, key, report["id"])
    columns, rows = result["columns"], result["rows"]
    return sum(row[columns.index("count" if type_ == "event_volume" else "users")] for row in rows)


@pytest.mark.parametrize(("to", "expected"), [(LISTED, 1), ("2025-06-01T12:00:00.122Z", 0)])
async def test_a_report_to_matches_the_event_listed_at_it(client, key, to, expected):
    window = {"from": "2025-06-01T00:00:00Z", "to": to}
    assert await _report_count(client, key, "event_volume",
                               {"events": ["precision"], "interval": "hour", **window}) == expected
    assert await _report_count(client, key, "funnel", {"events": ["precision", "later"], **window}) == expected
    assert await _report_count(client, key, "retention",
                               {"start_event": "precision", "return_event": "later", **window}) == expected


@pytest.mark.parametrize(("to", "expected"), [(LISTED, 1), ("2025-06-01T12:00:00.122Z", 0)])
async def test_chart_data_to_matches_the_event_listed_at_it(client, key, to, expected):
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "precision"}]})).json()
    resp = await client.get(f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data",
                            headers=bearer(key), params={"from": "2025-06-01T00:00:00Z", "to": to})
    body = await resp.json()
    assert body["to"] == to  # echoed as given
    assert sum(p["value"] for s in body["series"] for p in s["points"]) == expected


# The ISO 8601 forms clients commonly send, each with the time it stands for; all are accepted alike by
# POST /v1/events, batch items, identify, GET bounds, report configs and Segment's calls.
FORMS = [
    ("2025-11-25T10:00Z", "2025-11-25T10:00:00.000Z"),  # no seconds
    ("2025-11-25T10Z", "2025-11-25T10:00:00.000Z"),
    ("20251125T100000Z", "2025-11-25T10:00:00.000Z"),  # basic format
    ("2025-11-25T12:00:00.25+0200", "2025-11-25T10:00:00.250Z"),
    ("2025-11-25T12:00+02", "2025-11-25T10:00:00.000Z"),
    ("2025-11-25t10:00:00z", "2025-11-25T10:00:00.000Z"),
    ("2025-11-25 10:00:00.123456789Z", "2025-11-25T10:00:00.123Z"),
    ("2025-11-25T10:00:00,5Z", "2025-11-25T10:00:00.500Z"),
]
GARBAGE = ["yesterday", "2025-11-25X10:00Z", "2025-13-01T00:00Z", "2025-11-25T23:59:60Z", "2025-W48-3T10:00Z",
           "2025-11-25T24:00Z", " 2025-11-25T10:00Z", "2025-11-25T10:00Z" + "0" * 60]


@pytest.mark.parametrize(("sent", "listed"), FORMS)
async def test_timestamps_in_the_common_iso_8601_forms_are_accepted(client, make_key, sent, listed):
    key = await make_key("read,write")
    for path, body in (("/v1/events", {"event": "single", "user_id": "f1", "timestamp": sent}),
                       ("/v1/events/batch", {"events": [{"event": "batched", "user_id": "f2", "timestamp": sent}]}),
                       ("/v1/identify", {"user_id": "f3", "timestamp": sent})):
        resp = await client.post(path, headers=bearer(key), json=body)
        assert resp.status == 200 and (await resp.json()).get("failed", 0) == 0, (path, await resp.text())
    resp = await client.get("/v1/events", headers=bearer(key), params={"from": sent, "to": sent})
    assert sorted((e["event"], e["timestamp"]) for e in (await resp.json())["data"]) == [
        ("batched", listed), ("single", listed)]
    profile = await (await client.get("/v1/users/f3", headers=bearer(key))).json()
    assert profile["created_at"] == listed
    report = await create_report(client, key, {"name": "f", "type": "event_volume",
                                                "config": {"events": ["single"], "from": sent}})
    assert report["config"]["from"].startswith("2025-11-25T")


@pytest.mark.parametrize("sent", [*GARBAGE, "2025-11-25T10:00:00", "2025-11-25"])
async def test_other_timestamps_are_the_spec_400_naming_the_field(client, make_key, sent):
    key = await make_key("read,write")
    for path, body in (("/v1/events", {"event": "e", "user_id": "u", "timestamp": sent}),
                       ("/v1/identify", {"user_id": "u", "timestamp": sent})):
        resp = await client.post(path, headers=bearer(key), json=body)
        assert resp.status == 400, (path, await resp.text())
        error = (await resp.json())["error"]
        assert error["code"] == "invalid_request" and error["fields"][0]["field"] == "timestamp"
        if sent in ("2025-11-25T10:00:00", "2025-11-25"):
            assert "timezone" in error["message"]
    batch = await (await client.post("/v1/events/batch", headers=bearer(key), json={
        "events": [{"event": "e", "user_id": "u", "timestamp": sent}]})).json()
    assert batch["failed"] == 1 and "timestamp" in batch["errors"][0]["message"]
    if sent == "2025-11-25":
        return  # a report config takes a date alone (test_a_date_alone_is_utc_midnight_in_reports_and_charts)
    report = await create_report(client, key, {"name": "g", "type": "funnel",
                                               "config": {"events": ["a", "b"], "to": sent}}, status=400)
    assert report["error"]["fields"][0]["field"] == "config.to"
    if sent == "2025-11-25T10:00:00":
        assert "Z or an offset" in report["error"]["message"]


async def test_a_date_alone_is_utc_midnight_in_reports_and_charts(client, key):
    """A report config's from/to may be a date alone, as chart data's and GET /v1/events' bounds may: UTC
    midnight, a `to` covering that instant (its millisecond), not the whole day, as those bounds do. Report
    configs refused it."""
    config = {"events": ["precision"], "from": "2025-05-31", "to": "2025-06-01"}
    report = await create_report(client, key, {"name": "d", "type": "event_volume", "config": config})
    assert (report["config"]["from"], report["config"]["to"]) == ("2025-05-31T00:00:00Z", "2025-06-01T00:00:00Z")
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "precision"}]})).json()
    chart = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data"
    for to, counts in (("2025-06-01", [0, 0]), ("2025-06-02", [0, 1, 0])):
        rows = (await run_report(client, key, (await create_report(client, key, {
            "name": "d", "type": "event_volume", "config": {**config, "to": to}}))["id"]))["rows"]
        assert [r[2] for r in rows] == counts, to
        body = await (await client.get(chart, headers=bearer(key), params={"from": "2025-05-31", "to": to})).json()
        assert [p["value"] for p in body["series"][0]["points"]] == counts, to
        assert [r[0] for r in rows] == [p["timestamp"] for p in body["series"][0]["points"]]
    for type_, config in (("funnel", {"events": ["precision", "later"]}),
                          ("retention", {"start_event": "precision", "return_event": "later"})):
        report = await create_report(client, key, {"name": "d", "type": type_,
                                                   "config": {**config, "from": "20250601", "to": "2025-06-02"}})
        assert (report["config"]["from"], report["config"]["to"]) == ("2025-06-01T00:00:00Z", "2025-06-02T00:00:00Z")


@pytest.mark.parametrize("sent", GARBAGE)
async def test_query_bounds_refuse_what_bodies_refuse(client, make_key, sent):
    resp = await client.get("/v1/events", headers=bearer(await make_key("read")), params={"to": sent})
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"] == [{"field": "to", "message": "not ISO 8601"}]


async def test_segment_timestamps_take_the_same_forms(client, make_key):
    from tests.test_segment_api import basic, create_source, events, mid

    key = await make_key()
    h = basic((await create_source(client, key))["write_key"])
    for sent, _ in FORMS:
        resp = await client.post("/v1/track", headers=h, json={"messageId": mid(), "userId": "s1",
                                                               "event": "Seen", "timestamp": sent})
        assert resp.status == 200, (sent, await resp.text())
    assert sorted({e["timestamp"] for e in await events(client, key, event="seen")}) == sorted(
        {listed for _, listed in FORMS})
    resp = await client.post("/v1/track", headers=h, json={"userId": "s1", "event": "Seen", "timestamp": "yesterday"})
    assert resp.status == 400 and (await resp.json())["message"].startswith("timestamp:")
    resp = await client.post("/v1/batch", headers=h, json={"sentAt": "soon", "batch": []})
    assert resp.status == 400 and (await resp.json())["message"].startswith("sentAt:")


async def test_an_offset_whose_plus_became_a_space_in_the_query_string_is_read_as_its_plus(client, key):
    """`to=2025-06-01T14:00:00.123+02:00` typed into a URL unencoded reaches the server with a space for its `+`
    (form encoding), and was a 400 for a timestamp that looks right. After a time, a space then an offset can
    only be that offset, so it is read as one; a date alone then a time stays date and time."""
    listed = await client.get("/v1/events?event=precision&from=2025-06-01T14:00:00.123+02:00"
                              "&to=2025-06-01T14:00:00.123+02:00", headers=bearer(key))
    assert listed.status == 200, await listed.text()
    assert [e["timestamp"] for e in (await listed.json())["data"]] == [LISTED]
    assert await _listed(client, key, to="2025-06-01 14:00:00.122 02:00") == []
    assert await _listed(client, key, **{"from": "2025-06-01 12:00", "to": "2025-06-01 12:01"}) == [LISTED]


@pytest.mark.parametrize("bound", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
async def test_a_query_bound_outside_the_utc_calendar_is_a_400_not_a_500(client, key, bound):
    """Year 1 just after midnight at +14:00 is still year 0 in UTC, and the last second of 9999 at -14:00 is
    year 10000: valid ISO 8601 that no UTC date-time can hold. GET /v1/events and chart data answered 500
    (the database driver could not convert it); they are the bound's 400, as for any bound not understood."""
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "precision"}]})).json()
    chart = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data"
    for name in ("from", "to"):
        for path in ("/v1/events", chart):
            resp = await client.get(path, headers=bearer(key), params={name: bound})
            assert resp.status == 400, (path, name, await resp.text())
            error = (await resp.json())["error"]
            assert error["code"] == "invalid_request" and error["fields"][0]["field"] == name, (path, name)
