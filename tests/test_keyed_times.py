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
