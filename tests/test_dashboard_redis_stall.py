"""Dashboard reads that need a Redis that stalls (overloaded, or its packets dropped: it neither answers nor
refuses): the dashboard session kept there, and the realtime view's window. Each request waited out the
client's socket timeout (5 s) before its 503, request after request, each holding a connection and a handler
meanwhile. Now such a call waits at most common.outages.FALLBACK_WAIT_SECONDS; while Redis is down the others
answer 503 at once, and one a second asks Redis again, whose answer ends the outage."""

from __future__ import annotations

import dataclasses

from common import outages
from tests.conftest import metric
from tests.site_helpers import register_site
from tests.test_dependency_outages import HoldingRelay, own_redis  # noqa: F401 (a fixture)
from tests.test_shared_links import share, token_of


async def _reads_while_held(client, relay: HoldingRelay, path: str, holding: bytes) -> list[tuple]:
    """Three reads of `path` while the relay holds the Redis commands naming `holding`: (status, Retry-After,
    body) of each. The relay holds nothing again afterwards."""
    relay.holding = holding
    answers = []
    for _ in range(3):
        resp = await client.get(path)
        answers.append((resp.status, resp.headers.get("Retry-After"), await resp.json()))
    relay.holding = b""
    return answers


async def test_while_redis_stalls_one_dashboard_request_a_second_waits_for_it(make_client, settings, own_redis,  # noqa: F811
                                                                              login, monkeypatch):
    monkeypatch.setattr(outages, "PROBE_SECONDS", 60.0)  # a loaded machine's slow requests stay inside it
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    client = await make_client(dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0"))
    try:
        await login(the_client=client)
        assert (await client.get("/api/sites")).status == 200
        before = await (await client.get("/metrics")).text()
        answers = await _reads_while_held(client, relay, "/api/sites", b"tally_session_")
        after = await (await client.get("/metrics")).text()
        assert answers == [(503, "5", {"error": "service unavailable"})] * 3
        assert relay.held == 1  # the first asked Redis; the other two did not wait for it
        assert metric(after, "tally_dependency_outages_total", dependency="redis") == metric(
            before, "tally_dependency_outages_total", dependency="redis") + 1

        # Redis answers again: the next probe finds it, and the session is still signed in.
        monkeypatch.setattr(outages, "PROBE_SECONDS", 0.0)
        assert (await client.get("/api/sites")).status == 200
        assert (await client.get("/api/sites")).status == 200
    finally:
        await relay.cut()


async def test_while_redis_stalls_one_realtime_read_a_second_waits_for_it(make_client, settings, own_redis,  # noqa: F811
                                                                          login, workspace, database_url, monkeypatch):
    """Read through a shared link, so that no dashboard session (kept in Redis too) is read: the realtime window
    is the only Redis read of the request."""
    monkeypatch.setattr(outages, "PROBE_SECONDS", 60.0)
    relay = HoldingRelay("127.0.0.1", own_redis.port)
    port = await relay.start()
    client = await make_client(dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0"))
    try:
        await login(the_client=client)
        site, _ = await register_site(database_url, workspace, verified=False)
        token = token_of(await share(client, site))
        client.session.cookie_jar.clear()
        live = f"/api/analytics/realtime?siteId={site}&auth={token}"
        assert (await client.get(live)).status == 200
        answers = await _reads_while_held(client, relay, live, b"tally:rt:")
        assert answers == [(503, "5", {"error": "service unavailable"})] * 3
        assert relay.held == 1

        monkeypatch.setattr(outages, "PROBE_SECONDS", 0.0)
        resp = await client.get(live)
        assert resp.status == 200 and (await resp.json())["activeVisitors"] == 0
    finally:
        await relay.cut()
