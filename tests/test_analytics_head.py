"""HEAD on the dashboard's analytics reads and event log: aiohttp routes HEAD to the GET handler, which ran every
read of the analytics store (and brought it up to date first) only for the body to be dropped, so an uptime
monitor's or `curl -I`'s probe cost as much as a dashboard's opening. HEAD answers GET's status after GET's checks
and reads nothing, as the export's and a report run's HEAD do."""

from __future__ import annotations

import pytest

from storage.clickhouse import AnalyticsStore
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
