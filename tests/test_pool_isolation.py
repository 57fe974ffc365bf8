"""One tenant cannot stall everyone's database access: exports that are opened and never read, and
custom reports that sleep, leave /readyz and other tenants' requests answering. Waits are liveness
waits with generous bounds, not latency thresholds."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import socket
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from storage.db import init_connection
from storage.ids import new_id
from tests.analytics_support import create_site, insert_events
from tests.conftest import bearer
from tests.reports_support import create_report, set_plan

EVENTS = 8000  # with ~1 KB of props each, an export is far more than the socket buffers hold
LIVENESS = 60  # seconds: only a stalled server takes this long


@pytest.fixture
async def big_site(database_url, workspace):
    conn = await asyncpg.connect(database_url)
    try:
        await init_connection(conn)
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        pad = "x" * 1000
        rows = [(new_id("evt"), "pageview", f"/p/{i}", None, "US", "ip", f"s{i % 50}",
                 now - timedelta(seconds=i + 1), {"pad": pad}) for i in range(EVENTS)]
        await insert_events(conn, site_id, ws, rows)
    finally:
        await conn.close()
    return site_id


async def stalled_export(client, site_id: str) -> socket.socket:
    """GET /api/analytics/export on a raw socket with a tiny receive buffer; reads the response
    headers (the export has started) and then never reads again."""
    cookies = client.session.cookie_jar.filter_cookies(client.make_url("/"))
    cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in cookies.items())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (client.host, client.port))
    request = (f"GET /api/analytics/export?siteId={site_id}&limit=50000 HTTP/1.1\r\nHost: {client.host}\r\n"
               f"Cookie: {cookie}\r\n\r\n")
    await loop.sock_sendall(sock, request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1), LIVENESS)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


async def other_tenant_reads(client, make_key) -> None:
    key = await make_key("read,write", workspace_name=f"other-{secrets.token_hex(4)}")
    resp = await asyncio.wait_for(client.get("/v1/events?limit=1", headers=bearer(key)), LIVENESS)
    assert resp.status == 200


async def test_twelve_unread_exports_leave_readyz_and_other_tenants_answering(
        make_client, settings, make_key, login, big_site):
    client = await make_client(dataclasses.replace(settings, exports_per_account=20,
                                                   export_write_timeout_seconds=600))
    await login(the_client=client)
    sockets = [await stalled_export(client, big_site) for _ in range(12)]
    try:
        ready = await asyncio.wait_for(client.get("/readyz"), LIVENESS)
        assert ready.status == 200, await ready.text()
        await other_tenant_reads(client, make_key)
    finally:
        for sock in sockets:
            sock.close()
    # Keyset pages cover the window exactly once, newest first, and stop at the limit.
    resp = await client.get("/api/analytics/export", params={"siteId": big_site, "limit": "50000", "format": "json"})
    rows = await resp.json()
    assert len(rows) == EVENTS and len({r["id"] for r in rows}) == EVENTS
    assert [r["path"] for r in rows[:3]] == ["/p/0", "/p/1", "/p/2"]
    resp = await client.get("/api/analytics/export", params={"siteId": big_site, "limit": "1234"})
    assert len((await resp.text()).splitlines()) == 1 + 1234


async def test_exports_per_account_are_limited_and_a_stalled_one_times_out(make_client, settings, login, big_site):
    client = await make_client(dataclasses.replace(settings, exports_per_account=1,
                                                   export_write_timeout_seconds=1))
    await login(the_client=client)
    sock = await stalled_export(client, big_site)
    try:
        resp = await client.get("/api/analytics/export", params={"siteId": big_site, "limit": "1"})
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "10"
        assert (await resp.json())["error"] == "too many exports running; wait for one to finish"
        # The stalled export's write times out and its slot comes back.
        for _ in range(LIVENESS * 10):
            resp = await client.get("/api/analytics/export", params={"siteId": big_site, "limit": "1"})
            if resp.status == 200:
                break
            await asyncio.sleep(0.1)
        assert resp.status == 200
        assert len((await resp.text()).splitlines()) == 2
    finally:
        sock.close()


async def test_sleeping_custom_reports_leave_other_tenants_answering(
        make_client, settings, make_key, database_url, workspace, pool):
    """One workspace's runs hold at most report_pool_max - 1 report connections (more answer 429 at once,
    not queued), so another workspace's report still gets one: before, twelve sleeping runs of one tenant
    held the pool and queued ahead of everyone (security walk-through F3)."""
    client = await make_client(dataclasses.replace(settings, custom_sql_timeout_seconds=600,
                                                   report_timeout_seconds=600, key_cache_seconds=0))
    key = await make_key("read,write")
    other_ws = f"other-{secrets.token_hex(4)}"
    other = await make_key("read,write", workspace_name=other_ws)
    for name in (workspace, other_ws):
        await set_plan(database_url, name, "enterprise")
    report = await create_report(client, key, {"name": "slow", "type": "custom",
                                               "config": {"sql": "SELECT pg_sleep(600) AS slept"}})
    quick = await create_report(client, other, {"name": "quick", "type": "custom",
                                                "config": {"sql": "SELECT 1 AS one"}})
    cap = settings.report_pool_max - 1
    runs = [asyncio.create_task(client.get(f"/v1/reports/{report['id']}/run", headers=bearer(key)))
            for _ in range(12)]
    # pg_stat_activity shows the top-level statement: the sandbox's call of tally_report.run_sql().
    sleeping = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
                "AND query LIKE '%tally_report.run_sql%' AND pid <> pg_backend_pid()")
    try:
        for _ in range(LIVENESS * 10):
            if len(await pool.fetch(sleeping)) >= cap and sum(run.done() for run in runs) >= 12 - cap:
                break
            await asyncio.sleep(0.1)
        refused = [await run for run in runs if run.done()]
        assert len(refused) == 12 - cap and {r.status for r in refused} == {429}
        body = await refused[0].json()
        assert body["error"]["code"] == "reports_busy" and refused[0].headers["Retry-After"] == "5"
        resp = await asyncio.wait_for(client.get(f"/v1/reports/{quick['id']}/run", headers=bearer(other)),
                                      LIVENESS)
        assert resp.status == 200 and (await resp.json())["rows"] == [[1]]
        await other_tenant_reads(client, make_key)
        assert len(await pool.fetch(sleeping)) == cap  # answered while the slow ones still ran
    finally:
        for _ in range(LIVENESS * 10):  # end the sleeps
            if all(run.done() for run in runs):
                break
            await pool.execute(f"SELECT pg_cancel_backend(pid) FROM ({sleeping}) s")
            await asyncio.sleep(0.1)
    statuses = sorted([(await run).status for run in runs])
    assert statuses == [429] * (12 - cap) + [504] * cap
    # The slots came back: the workspace runs again.
    fast = await create_report(client, key, {"name": "fast", "type": "custom", "config": {"sql": "SELECT 2 AS two"}})
    assert (await client.get(f"/v1/reports/{fast['id']}/run", headers=bearer(key))).status == 200


async def test_report_waits_for_its_own_pool_then_answers_503(make_client, settings, make_key):
    from app.appkeys import REPORT_POOL

    client = await make_client(dataclasses.replace(settings, report_pool_max=1, report_timeout_seconds=1))
    key = await make_key("read,write")
    report = await create_report(client, key, {"name": "volume", "type": "event_volume",
                                               "config": {"events": ["signup"]}})
    held = await client.app[REPORT_POOL].acquire()  # every report connection busy
    try:
        resp = await client.get(f"/v1/reports/{report['id']}/run", headers=bearer(key))
        assert resp.status == 503 and resp.headers["Retry-After"] == "5"
        assert (await resp.json())["error"]["code"] == "reports_busy"
        await other_tenant_reads(client, make_key)
    finally:
        await client.app[REPORT_POOL].release(held)
    resp = await client.get(f"/v1/reports/{report['id']}/run", headers=bearer(key))
    assert resp.status == 200
