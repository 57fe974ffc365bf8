"""An analytics store records which PostgreSQL database it mirrors, and is refused with another one: after a
change of DATABASE_URL its dashboards counted the other database's events. In both modes: a plain store and
one of a cluster (Distributed tables over local ones, tests/conftest.py's two-shard cluster on chDB), each in
a ClickHouse database of its own so that what this test records touches no other test's store."""

from __future__ import annotations

import dataclasses
import secrets
from urllib.parse import urlparse

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from app.appkeys import MIRROR
from app.server import init_app
from storage import analytics_mirror
from storage.analytics_mirror import StoreMismatch
from storage.clickhouse import AnalyticsStore
from storage.clickhouse_layout import ensure_schema
from storage.migrate import migrate
from tests.analytics_support import store_of_its_own
from tests.conftest import TEST_CLUSTER, bearer


@pytest.fixture(params=["plain", "cluster"])
def own_store(request, analytics_store: AnalyticsStore) -> AnalyticsStore:
    return store_of_its_own(analytics_store, "origin", TEST_CLUSTER if request.param == "cluster" else None)


@pytest.fixture
async def other_database(pg_admin_dsn):
    """A second PostgreSQL database, migrated, dropped at the end."""
    name = f"tally_other_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(pg_admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlparse(pg_admin_dsn)._replace(path=f"/{name}").geturl()
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    yield dsn
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


async def _refused(app: web.Application) -> StoreMismatch:
    """Start `app`, which must be refused for mirroring another database."""
    server = TestServer(app)
    try:
        with pytest.raises(StoreMismatch) as refused:
            await server.start_server()
    finally:
        await server.close()
    return refused.value


async def _keyed_events(store: AnalyticsStore) -> int:
    return (await store.query(f"SELECT count() FROM {store.table('keyed_events')} FINAL"))[0][0]


async def test_a_store_is_tied_to_its_database_until_a_rebuild_adopts_another(
        own_store, settings, database_url, other_database, aiohttp_client, make_key):
    key = await make_key("read,write")
    first = await aiohttp_client(init_app(settings, analytics=own_store))  # a new store adopts the database
    for _ in range(3):
        assert (await first.post("/v1/events", headers=bearer(key), json={"event": "a", "user_id": "u"})).status == 200
    await first.app[MIRROR].catch_up()
    await first.close()
    counted = await _keyed_events(own_store)
    assert counted >= 3

    # Opened with another database: refused at start, before its mirror could add that database's events.
    refused = await _refused(init_app(dataclasses.replace(settings, database_url=other_database), analytics=own_store))
    assert refused.recorded.database == urlparse(database_url).path[1:]
    assert refused.current.database == urlparse(other_database).path[1:]
    assert refused.recorded.system_identifier == refused.current.system_identifier  # one server here
    assert refused.recorded.oid != refused.current.oid
    assert await _keyed_events(own_store) == counted

    # A full rebuild makes it mirror the other database (a rebuild since a day would keep the first one's
    # older events, so it is not one that adopts: the CLI checks before it).
    other = await asyncpg.connect(other_database)
    try:
        assert await analytics_mirror.rebuild(other, own_store) == 0
        assert await analytics_mirror.check_origin(other, own_store) is None
    finally:
        await other.close()
    assert await _keyed_events(own_store) == 0
    started = await aiohttp_client(init_app(dataclasses.replace(settings, database_url=other_database),
                                            analytics=own_store))
    assert (await started.get("/readyz")).status == 200
    await started.close()
    await _refused(init_app(settings, analytics=own_store))  # and now the first database is the other one


async def test_a_store_from_before_the_record_adopts_the_database_it_is_opened_with(own_store, database_url,
                                                                                 other_database):
    await own_store.command(f"DROP TABLE {own_store.local_table('mirrored_database')}")
    if own_store.cluster:
        await own_store.command(f"DROP TABLE {own_store.table('mirrored_database')}")
    ensure_schema(own_store)  # as a store from before is opened: the table is made, empty
    conn = await asyncpg.connect(database_url)
    try:
        adopted = await analytics_mirror.check_origin(conn, own_store)
        assert adopted is not None and adopted.database == urlparse(database_url).path[1:]
        assert await analytics_mirror.check_origin(conn, own_store) is None
    finally:
        await conn.close()
    conn = await asyncpg.connect(other_database)
    try:
        with pytest.raises(StoreMismatch):
            await analytics_mirror.check_origin(conn, own_store)
    finally:
        await conn.close()
