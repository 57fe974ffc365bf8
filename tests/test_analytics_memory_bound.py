"""A site read or a keyed report that the analytics store refuses for its per-query memory bound
(TALLY_ANALYTICS_MAX_MEMORY_MB) says so, in its API's shape: at 9M events over 90 days the page breakdown with every
metric needs ~0.5-1 GiB, a busier site more (docs/benchmarks.md). Here the bound is forced to a byte, so every read
is over it, or the writes' bound below what they need."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from storage.clickhouse import AnalyticsStore, query_bounds
from tests.analytics_support import EVENTS, load_fixture
from tests.conftest import bearer
from tests.reports_support import create_report, run_report


@contextmanager
def bound_of_a_byte(store: AnalyticsStore) -> Iterator[None]:
    """Every read of the store is over its memory bound until the block ends."""
    store.read_settings.update(max_memory_usage=1, max_untracked_memory=0)
    try:
        yield
    finally:
        store.read_settings.pop("max_memory_usage")
        store.read_settings.pop("max_untracked_memory")


@contextmanager
def writes_bound_tightly(store: AnalyticsStore) -> Iterator[None]:
    """Every write of the store (the rows a read derives and caches: a day's counts, a window's visitors) is over
    its memory bound until the block ends; reads keep theirs. Not a byte, as for reads: chDB's client applies a
    command's settings with SET and restores them after it, and under a bound of a byte the restoring SET fails
    too, which would leave the bound on the writing connection."""
    saved = store.query_settings["max_memory_usage"]
    store.read_settings.update(max_memory_usage=saved)
    store.query_settings.update(max_memory_usage=200_000, max_untracked_memory=0)
    try:
        yield
    finally:
        store.query_settings.update(max_memory_usage=saved)
        store.query_settings.pop("max_untracked_memory")
        store.read_settings.pop("max_memory_usage")


@pytest.mark.parametrize(("route", "params"), [
    ("overview", {}),
    ("overview", {"filter": "page~=/blog"}),
    ("timeseries", {"interval": "hour"}),
    ("top-pages", {}),
    ("breakdown", {"property": "page", "metrics": "visitors,visits,pageviews,events,bounce_rate,visit_duration"}),
    ("breakdown", {"property": "entry_page"}),
    ("events", {"filter": "country==US"}),
])
async def test_a_read_over_the_memory_bound_says_so(client, database_url, workspace, login, analytics_store,
                                                    route, params):
    await login()
    site = await load_fixture(database_url, workspace)
    first = await client.get("/api/analytics/overview", params={"siteId": site.site_id, "range": "90d"})
    assert first.status == 200  # mirrored, within the bound

    with bound_of_a_byte(analytics_store):
        resp = await client.get(f"/api/analytics/{route}", params={"siteId": site.site_id, "range": "90d", **params})
        body = await resp.json()
    assert resp.status == 500  # the spec's storage or query failure, in its error shape
    assert body["error"] == "read too large"
    assert "narrow the range or the filters" in body["detail"]

    again = await client.get(f"/api/analytics/{route}", params={"siteId": site.site_id, "range": "90d", **params})
    assert again.status == 200


async def test_a_read_whose_derived_rows_are_over_the_memory_bound_says_so(client, database_url, workspace, login,
                                                                          analytics_store):
    """The first unfiltered read of ended days computes and stores their counts and visitor states (an INSERT ...
    SELECT, storage/analytics_days.py): over the bound, that write is the read's failure, in the same shape as a
    read over it. It was a 500 `internal error`, with a traceback logged as for a bug."""
    await login()
    site = await load_fixture(database_url, workspace)
    params = {"siteId": site.site_id, "range": "90d"}
    filtered = await client.get("/api/analytics/overview", params={**params, "filter": "country==US"})
    assert filtered.status == 200  # mirrored; a filtered read derives no day rows

    with writes_bound_tightly(analytics_store):
        resp = await client.get("/api/analytics/overview", params=params)
        body = await resp.json()
    assert resp.status == 500
    assert body["error"] == "read too large"

    again = await client.get("/api/analytics/overview", params=params)
    assert again.status == 200
    assert (await again.json())["totalEvents"] == len(EVENTS)


async def test_a_keyed_report_over_the_memory_bound_says_so(client, make_key, analytics_store):
    """The keyed API's shape, code read_too_large (the keyed spec names no 5xx codes): it was internal_error, with
    a traceback logged as for a bug."""
    key = await make_key("read,write")
    report = await create_report(client, key, {"name": "r", "type": "event_volume", "config": {
        "events": ["signup"], "from": "2024-04-01T00:00:00Z", "to": "2024-04-02T00:00:00Z"}})
    assert (await client.post("/v1/events", headers=bearer(key), json={
        "event": "signup", "user_id": "u1", "timestamp": "2024-04-01T10:00:00Z"})).status == 200
    await run_report(client, key, report["id"])  # mirrored, within the bound
    with bound_of_a_byte(analytics_store):
        body = await run_report(client, key, report["id"], status=500)
    assert body["error"]["code"] == "read_too_large"
    assert "narrow the range" in body["error"]["message"]
    assert sum(row[-1] for row in (await run_report(client, key, report["id"]))["rows"]) == 1


async def test_a_grouping_past_half_the_bound_goes_on_on_disk(analytics_store: AnalyticsStore):
    """A grouping larger than the bound (4M keys under 128 MiB) answers, as the largest 90-day breakdowns do
    under the default bound, instead of failing at it."""
    rows = await analytics_store.query(
        "SELECT count(), sum(n) FROM (SELECT number % 4000000 AS k, count() AS n FROM numbers(8000000) GROUP BY k)",
        settings=query_bounds(max_threads=2, max_memory_mb=128))
    assert rows == [(4_000_000, 8_000_000)]
