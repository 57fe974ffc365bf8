"""A read that the analytics store stops at its per-query time bound (TALLY_ANALYTICS_READ_TIMEOUT_SECONDS) says so,
in its API's shape, as a 504: it had no bound, so a read held one of the store's few read clients for as long as
it took, whoever had stopped waiting for it. A report's run keeps its own timeout. Here the bound is forced to a
microsecond, so every read that reads rows is over it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage.clickhouse import AnalyticsStore, QueryTooSlow
from tests.analytics_support import load_fixture
from tests.conftest import bearer
from tests.reports_support import create_report, run_report
from tests.test_dashboards import CHART, _create


@contextmanager
def bound_of_a_microsecond(store: AnalyticsStore) -> Iterator[None]:
    saved = store.read_settings["max_execution_time"]
    store.read_settings["max_execution_time"] = 0.000001
    try:
        yield
    finally:
        store.read_settings["max_execution_time"] = saved


def test_reads_are_bounded_by_default(analytics_store):
    assert analytics_store.read_settings["max_execution_time"] == 30  # open_store's default, the setting's


@pytest.mark.parametrize(("route", "params"), [
    ("overview", {"filter": "page~=/blog"}),
    ("top-pages", {}),
    ("breakdown", {"property": "entry_page", "metrics": "visitors,bounce_rate"}),
])
async def test_a_site_read_over_the_time_bound_is_a_504_that_says_so(client, database_url, workspace, login,
                                                                     analytics_store, route, params):
    await login()
    site = await load_fixture(database_url, workspace)
    query = {"siteId": site.site_id, "range": "90d", **params}
    assert (await client.get(f"/api/analytics/{route}", params=query)).status == 200  # mirrored, within the bound

    with bound_of_a_microsecond(analytics_store):
        resp = await client.get(f"/api/analytics/{route}", params=query)
        body = await resp.json()
    assert resp.status == 504, body
    assert body["error"] == "read timed out"
    assert "TALLY_ANALYTICS_READ_TIMEOUT_SECONDS" in body["detail"]

    assert (await client.get(f"/api/analytics/{route}", params=query)).status == 200


async def test_chart_data_over_the_time_bound_is_a_504_and_a_report_keeps_its_own_timeout(client, make_key,
                                                                                         analytics_store):
    key = await make_key("read,write")
    assert (await client.post("/v1/events", headers=bearer(key), json={
        "event": "signup", "user_id": "u1", "timestamp": "2024-04-01T10:00:00Z",
        "properties": {"plan": "pro"}})).status == 200
    made = await _create(client, key, charts=[CHART])
    data = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data"
    window = {"from": "2024-03-01T00:00:00Z", "to": "2024-05-01T00:00:00Z"}
    assert (await client.get(data, headers=bearer(key), params=window)).status == 200
    report = await create_report(client, key, {"name": "r", "type": "event_volume", "config": {
        "events": ["signup"], "from": "2024-04-01T00:00:00Z", "to": "2024-04-02T00:00:00Z"}})

    with bound_of_a_microsecond(analytics_store):
        resp = await client.get(data, headers=bearer(key), params=window)
        body = await resp.json()
        ran = await run_report(client, key, report["id"])
    assert resp.status == 504, body
    assert body["error"]["code"] == "read_timeout"
    assert "TALLY_ANALYTICS_READ_TIMEOUT_SECONDS" in body["error"]["message"]
    assert sum(row[-1] for row in ran["rows"]) == 1  # under TALLY_REPORT_TIMEOUT_SECONDS, not the read bound


async def test_a_read_stopped_at_a_bound_of_its_own_is_query_too_slow(analytics_store):
    """A report's run passes its own max_execution_time; app/reports/runner.py answers QueryTooSlow as 504
    report_timeout."""
    with pytest.raises(QueryTooSlow):
        await analytics_store.query("SELECT count() FROM numbers(10000000) WHERE sipHash64(number) % 7 = 1",
                                    settings={"max_execution_time": 0.000001})
