"""HEAD on the dashboard's analytics reads, its event log and charts' data: aiohttp routes HEAD to the GET handler,
which ran every read of the analytics store (and brought it up to date first) only for the body to be dropped, so
an uptime monitor's or `curl -I`'s probe cost as much as a dashboard's opening. HEAD answers GET's status after
GET's checks and reads nothing, as the export's and a report run's HEAD do."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from storage.clickhouse import AnalyticsStore
from tests.conftest import bearer
from tests.site_helpers import post_event, register_site

READS = [("overview", {}), ("timeseries", {}), ("top-pages", {}), ("top-referrers", {}), ("top-countries", {}),
         ("breakdown", {"property": "page", "metrics": "visitors,bounce_rate"}),
         ("has-values", {"properties": "city"}), ("property-keys", {}), ("events", {})]


@pytest.fixture
def store_calls(monkeypatch) -> list[str]:
    """The statements sent to the analytics store (reads, and the writes a read derives), as they run."""
    calls: list[str] = []
    for method in ("query_sync", "command_sync"):
        real = getattr(AnalyticsStore, method)

        def counted(self, sql, *args, _real=real, **kwargs):
            calls.append(sql)
            return _real(self, sql, *args, **kwargs)
        monkeypatch.setattr(AnalyticsStore, method, counted)
    return calls


@pytest.mark.parametrize(("read", "extra"), READS, ids=[r for r, _ in READS])
async def test_head_answers_what_get_would_without_reading_the_store(client, database_url, workspace, login,
                                                                    store_calls, read, extra):
    await login()
    site_id, _ = await register_site(database_url, workspace)
    assert (await post_event(client, {"s": site_id, "n": "pageview", "u": "https://x.example/a"})).status == 202
    params = {"siteId": site_id, "range": "24h", **extra}
    get = await client.get(f"/api/analytics/{read}", params=params)
    assert get.status == 200, await get.text()
    assert store_calls  # the GET read the store
    store_calls.clear()
    probe = await client.head(f"/api/analytics/{read}", params=params)
    assert probe.status == 200 and probe.headers["Content-Type"] == "application/json"
    assert await probe.read() == b""
    assert store_calls == []

    for bad in ({**params, "range": "2y"}, {**params, "siteId": "no-such-site"}):  # GET's 400 and 404
        probe, get = await client.head(f"/api/analytics/{read}", params=bad), await client.get(
            f"/api/analytics/{read}", params=bad)
        assert probe.status == get.status and probe.status in (400, 404), bad
    await client.post("/api/auth/logout")
    assert (await client.head(f"/api/analytics/{read}", params=params)).status == 401
    assert store_calls == []


async def test_head_on_chart_data_answers_without_reading_the_store(client, make_key, store_calls):
    """The same for a /v1 chart's data (which keeps its rate-limit headers) and a public dashboard's data."""
    key = await make_key("read,write")
    resp = await client.post("/v1/events", headers=bearer(key),
                             json={"event": "signup", "user_id": "u1", "timestamp": "2025-03-01T10:00:00Z"})
    assert resp.status == 200, await resp.text()
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "Launch", "charts": [{"title": "Signups", "type": "bar", "event": "signup"}]})).json()
    shared = await (await client.post(f"/v1/dashboards/{made['id']}/share", headers=bearer(key))).json()
    window = "from=2025-03-01T00:00:00Z&to=2025-03-02T00:00:00Z"
    keyed = (f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data?{window}", bearer(key))
    public = (f"{urlparse(shared['public_url']).path}/data?{window}", {})
    for path, headers in (keyed, public):
        get = await client.get(path, headers=headers)
        assert get.status == 200, await get.text()
        assert store_calls
        store_calls.clear()
        probe = await client.head(path, headers=headers)
        assert probe.status == 200 and probe.headers["Content-Type"] == "application/json"
        assert await probe.read() == b""
        assert store_calls == []
        if headers:
            assert int(probe.headers["X-RateLimit-Remaining"]) < int(get.headers["X-RateLimit-Remaining"])
