"""Reports after a Segment alias: the merged user is one actor in every report, and erasing that user
removes the events they had sent before the alias too (the analytics store, not only PostgreSQL)."""

from __future__ import annotations

import uuid

from tests.reports_support import create_report, run_report
from tests.test_segment_api import basic, create_source

DAY = {"from": "2026-10-20T00:00:00Z", "to": "2026-10-20T23:00:00Z"}


async def _segment(client, write_key: str, *messages: dict) -> None:
    for body in messages:
        body = dict(body)
        resp = await client.post(f"/v1/{body.pop('type')}", headers=basic(write_key),
                                 json={"messageId": str(uuid.uuid4()), **body})
        assert resp.status == 200, await resp.text()


async def _aliased_user(client, key: str) -> None:
    """anon-z signs up and views a page anonymously, zed creates a project and comes back the next day, then
    anon-z is aliased to zed."""
    write_key = (await create_source(client, key))["write_key"]
    await _segment(client, write_key,
                   {"type": "track", "anonymousId": "anon-z", "event": "signup", "timestamp": "2026-10-20T10:00:00Z"},
                   {"type": "track", "anonymousId": "anon-z", "event": "page_viewed",
                    "timestamp": "2026-10-20T10:05:00Z"},
                   {"type": "track", "userId": "zed", "event": "project_created", "timestamp": "2026-10-20T11:00:00Z"},
                   {"type": "track", "userId": "zed", "event": "session_started", "timestamp": "2026-10-21T09:00:00Z"})
    # Reports run once before the alias, so the anonymous events are in the analytics store already.
    report = await create_report(client, key, {"name": "v", "type": "event_volume",
                                               "config": {"events": ["signup"], **DAY}})
    assert (await run_report(client, key, report["id"]))["rows"][0][2] == 1
    await _segment(client, write_key, {"type": "alias", "previousId": "anon-z", "userId": "zed"})


async def _funnel(client, key: str) -> list[int]:
    report = await create_report(client, key, {"name": "f", "type": "funnel",
                                               "config": {"events": ["signup", "project_created"], **DAY}})
    return [row[2] for row in (await run_report(client, key, report["id"]))["rows"]]


async def _volume(client, key: str) -> dict[str, int]:
    report = await create_report(client, key, {"name": "v", "type": "event_volume", "config": {
        "events": ["signup", "page_viewed", "project_created"], "interval": "week", **DAY}})
    return {row[1]: row[2] for row in (await run_report(client, key, report["id"]))["rows"]}


async def test_a_funnel_counts_an_aliased_user_once(client, make_key):
    key = await make_key()
    await _aliased_user(client, key)
    assert await _funnel(client, key) == [1, 1]
    retention = await create_report(client, key, {"name": "r", "type": "retention", "config": {
        "start_event": "signup", "return_event": "session_started", "period": "day", "periods": 1, **DAY}})
    assert [row[1:] for row in (await run_report(client, key, retention["id"]))["rows"]] == [[1, 1.0]]
    assert await _volume(client, key) == {"signup": 1, "page_viewed": 1, "project_created": 1}


async def test_erasing_an_aliased_user_removes_their_anonymous_events_from_reports(client, make_key):
    key = await make_key()
    await _aliased_user(client, key)
    resp = await client.delete("/v1/users/zed", headers={"Authorization": f"Bearer {key}"})
    assert resp.status == 204
    assert await _volume(client, key) == {"signup": 0, "page_viewed": 0, "project_created": 0}
    assert await _funnel(client, key) == [0, 0]
