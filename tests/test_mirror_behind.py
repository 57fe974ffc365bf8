"""Every analytics read waits for the store to hold the events committed before it. When that wait outlasts the
report timeout (here the mirror is blocked on the outbox; after an upgrade, a backlog of millions of events that
took minutes), the read answers 503 with Retry-After in its API's shape instead of hanging until the backlog is
mirrored (upgrade walk-through), and the same read answers once the store has caught up."""

from __future__ import annotations

import asyncio
import dataclasses
from contextlib import asynccontextmanager

import asyncpg

from app.appkeys import MIRROR
from app.outages import MIRROR_BEHIND
from tests.analytics_support import load_fixture
from tests.conftest import bearer
from tests.reports_support import create_report, run_report


@asynccontextmanager
async def mirror_blocked(database_url: str):
    blocker = await asyncpg.connect(database_url)
    try:
        async with blocker.transaction():
            await blocker.execute("LOCK TABLE analytics_outbox IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await blocker.close()


async def test_a_site_read_behind_the_mirror_is_a_503_then_answers(make_client, settings, database_url, workspace,
                                                                  login):
    client = await make_client(dataclasses.replace(settings, report_timeout_seconds=0.3))
    await login(the_client=client)
    site = await load_fixture(database_url, workspace)
    url = f"/api/analytics/overview?siteId={site.site_id}&range=7d"
    async with mirror_blocked(database_url):
        resp = await asyncio.wait_for(client.get(url), 20)  # it waited for the whole backlog
        assert resp.status == 503
        assert resp.headers["Retry-After"] == "10"
        assert await resp.json() == {"error": MIRROR_BEHIND}
    await client.app[MIRROR].catch_up()  # the backlog mirrored (the read's own wait is bounded by 0.3 s here)
    resp = await client.get(url)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["totalEvents"] > 0


async def test_a_keyed_chart_behind_the_mirror_is_a_503_in_the_keyed_shape(make_client, settings, make_key):
    client = await make_client(dataclasses.replace(settings, report_timeout_seconds=0.3))
    key = await make_key("read,write")
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "d", "charts": [{"title": "t", "type": "line", "event": "signup"}]})).json()
    url = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data"
    async with mirror_blocked(settings.database_url):
        resp = await asyncio.wait_for(client.get(url, headers=bearer(key)), 20)
        assert resp.status == 503
        assert resp.headers["Retry-After"] == "10"
        assert await resp.json() == {"error": {"code": "unavailable", "message": MIRROR_BEHIND}}
    await client.app[MIRROR].catch_up()
    resp = await client.get(url, headers=bearer(key))
    assert resp.status == 200, await resp.text()


async def test_an_erasure_behind_the_mirror_answers_and_no_read_returns_the_user(make_client, settings, make_key):
    """DELETE /v1/users/{id} applies the erasure to the store at once when it can; behind a backlog it answers
    204 after the bounded wait (it waited for the whole backlog), the erasure queued, and reads apply it first."""
    client = await make_client(dataclasses.replace(settings, report_timeout_seconds=0.3))
    key = await make_key("read,write,admin")
    events = [{"event": "signup", "user_id": user, "timestamp": "2024-03-01T10:00:00Z"} for user in ("u1", "u2")]
    resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": events})
    assert (await resp.json())["received"] == 2
    report = await create_report(client, key, {"name": "s", "type": "event_volume", "config": {
        "events": ["signup"], "from": "2024-03-01T00:00:00Z", "to": "2024-03-02T00:00:00Z"}})
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 2
    async with mirror_blocked(settings.database_url):
        resp = await asyncio.wait_for(client.delete("/v1/users/u1", headers=bearer(key)), 20)
        assert resp.status == 204
        resp = await asyncio.wait_for(client.get(f"/v1/reports/{report['id']}/run", headers=bearer(key)), 20)
        assert resp.status == 503
    await client.app[MIRROR].catch_up()
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 1
