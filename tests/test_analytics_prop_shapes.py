"""Custom property keys of odd but valid shapes on the site-analytics reads: a key is whatever the tracker
sent (props are free-form JSON), so a `props:<key>` filter names that key exactly, as its breakdown does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from storage import events as events_store
from storage.db import init_connection
from storage.events import EventRow
from storage.ids import new_id
from tests.analytics_support import create_site


@pytest.fixture
async def site(client, database_url, workspace, login) -> str:
    """One event with {"plan ": "pro"}, two with {"plan": "pro"} and one with {"\u2028": "pro"}."""
    await login()
    conn = await asyncpg.connect(database_url)
    try:
        await init_connection(conn)
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        rows = [EventRow(new_id("evt"), ws, "live", "signup", now - timedelta(minutes=n + 1),
                         now - timedelta(minutes=n + 1), site_id=site_id, session_id=f"s{n}", ip_hash=f"v{n}",
                         path="/", properties=props)
                for n, props in enumerate([{"plan ": "pro"}, {"plan": "pro"}, {"plan": "pro"}, {"\u2028": "pro"}])]
        await events_store.ensure_partitions(conn, {r.ts for r in rows})
        await events_store.copy_events(conn, rows)
    finally:
        await conn.close()
    return site_id


async def total_events(client, site_id: str, term: str) -> tuple[int, dict]:
    resp = await client.get("/api/analytics/overview", params={"siteId": site_id, "range": "24h", "filter": term})
    return resp.status, await resp.json()


async def test_a_filter_names_a_key_with_trailing_whitespace_exactly(client, site):
    """The dashboard filters on a Custom properties row by `props:<key>==<value>`, the key as the breakdown
    gave it: "plan " is not "plan"."""
    resp = await client.get("/api/analytics/breakdown", params={"siteId": site, "range": "24h",
                                                                "property": "props:plan ", "metrics": "events"})
    assert (await resp.json())["data"] == [{"key": "pro", "events": 1}]
    status, body = await total_events(client, site, "props:plan ==pro")
    assert (status, body["totalEvents"]) == (200, 1)
    status, body = await total_events(client, site, "props:plan==pro")
    assert (status, body["totalEvents"]) == (200, 2)


async def test_a_filter_on_a_whitespace_key_is_no_invalid_filter(client, site):
    status, body = await total_events(client, site, "props:\u2028==pro")
    assert (status, body.get("totalEvents")) == (200, 1), body
