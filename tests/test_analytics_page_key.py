"""The store's page key: the path without query string or fragment, but with a hash route (Plausible's hash
mode), in a new store and in one from before hash routes were pages (its input view is made again)."""

from __future__ import annotations

import secrets

import pytest

from storage.clickhouse import AnalyticsStore
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import PAGE_KEY, SITE_FROM_INPUT
from tests.analytics_support import store_of_its_own
from tests.conftest import TEST_CLUSTER

OLD_PAGE_KEY = r"replaceRegexpOne(path, '(?s)[?#].*', '')"
PATHS = {"/app/#/settings?tab=2": "/app/#/settings", "/app/#!/billing": "/app/#!/billing", "/app/#top": "/app/",
         "/app/#/": "/app/", "/p?q=1#/r": "/p#/r", "/pricing?plan=a": "/pricing", "?only=query": ""}


@pytest.fixture(params=["plain", "cluster"])
def own_store(request, analytics_store: AnalyticsStore) -> AnalyticsStore:
    return store_of_its_own(analytics_store, "pk", TEST_CLUSTER if request.param == "cluster" else None)


async def pages(store: AnalyticsStore) -> dict[str, str]:
    site = f"site_{secrets.token_hex(4)}"
    values = ", ".join(f"('evt_{i}', '{site}', 'pageview', now64(6), '{path}')" for i, path in enumerate(PATHS))
    await store.command(f"INSERT INTO {store.database}.events_in (id, site_id, name, ts, path) VALUES {values}")
    rows = store.client.query(f"SELECT id, page FROM {store.local_table('site_events')} WHERE site_id = {{s:String}}",
                              parameters={"s": site}).result_rows
    paths = list(PATHS)
    assert len(rows) == len(paths)  # one input view: each event stored once (the local table: both test
    # shards are this process, so the Distributed one would list each row twice)
    return {paths[int(i.removeprefix("evt_"))]: page for i, page in rows}


async def test_hash_routes_are_pages(own_store):
    assert await pages(own_store) == PATHS


async def test_a_store_from_before_gets_the_hash_route_page_key(own_store):
    view = f"{own_store.database}.site_events_in_mv"
    await own_store.command(f"DROP VIEW {view}{own_store.on_cluster}")
    await own_store.command(
        f"CREATE MATERIALIZED VIEW {view}{own_store.on_cluster} TO {own_store.table('site_events')} AS "
        + SITE_FROM_INPUT.replace(PAGE_KEY, OLD_PAGE_KEY).format(source=f"{own_store.database}.events_in"))
    assert (await pages(own_store))["/app/#!/billing"] == "/app/"  # as a store from before keys it
    ensure_schema(own_store)
    assert await pages(own_store) == PATHS
    ensure_schema(own_store)  # opened again: nothing to do, one view
    assert await pages(own_store) == PATHS
