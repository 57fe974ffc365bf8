"""Data sources may not reach Tally's own servers (any mode), nor loopback, private or link-local
addresses in production unless TALLY_SOURCES_ALLOW_HOSTS allows them; refusals carry one fixed text.
The policy is checked after resolution, on every connection: redirects and base_url overrides too."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from urllib.parse import urlparse

import pytest
import requests
from aiohttp import web

from app.sources.base import SourceError
from app.sources.netguard import REFUSED, DestinationRefused, NetGuard, canonical
from tests.conftest import bearer, connect
from tests.fake_peers import FakeStripe, base_url, serve
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_http import STRIPE_KEY, charge, customer
from tests.test_data_sources_sql import add_signups, pg_source, scratch_pg  # noqa: F401 (fixture)


def stripe_source(url: str) -> dict:
    return {"name": "billing", "type": "stripe", "credentials": {"api_key": STRIPE_KEY}, "options": {"base_url": url}}


def hubspot_source(url: str) -> dict:
    """HubSpot's client library keeps its own urllib3 pools; the policy guards them too."""
    return {"name": "crm", "type": "hubspot", "credentials": {"access_token": "pat-na1-probe"},
            "options": {"base_url": url}}


def salesforce_source(url: str) -> dict:
    """simple-salesforce runs on the policy's requests session."""
    return {"name": "sf", "type": "salesforce", "credentials": {"access_token": "00Dprobe!token", "instance_url": url},
            "options": {"table": "Account"}}


def own_db_source(database_url: str, host: str | None = None) -> dict:
    """The issue's attack: a postgres source pointed at the database Tally itself uses."""
    db = urlparse(database_url)
    return {"name": "mine", "type": "postgres",
            "credentials": {"host": host or db.hostname, "port": db.port or 5432, "database": db.path.lstrip("/"),
                            "username": db.username or "postgres", "password": "x"},
            "options": {"query": "SELECT id, workspace_id FROM api_keys", "event_name": "stolen_key"}}


def redirect_to(location: str):
    async def handle(request: web.Request) -> web.Response:
        raise web.HTTPFound(location)

    return handle


async def refused(client, key: str, body: dict) -> dict:
    created = await create(client, key, body)
    result = await wait_status(client, key, created["id"], "active", "error", tries=600)
    assert result["status"] == "error", result
    assert result["status_reason"] == REFUSED
    return result


async def imported_rows(database_url: str, workspace: str) -> int:
    conn = await connect(database_url)
    try:
        return await conn.fetchval(
            "SELECT count(*) FROM events e JOIN workspaces w ON w.id = e.workspace_id WHERE w.name = $1", workspace)
    finally:
        await conn.close()


@pytest.fixture
async def production(make_client, settings):
    async def make(**changes):
        return await make_client(dataclasses.replace(settings, env="production", **changes))

    return make


@pytest.fixture
async def stripe():
    fake = FakeStripe(api_key=STRIPE_KEY)
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    server = await serve(fake.app())
    yield base_url(server)
    await server.close()


# --- Tally's own servers: refused in every mode -----------------------------------------------------

@pytest.mark.parametrize("host", [None, "localhost", "127.0.0.2", "::ffff:127.0.0.1", "0.0.0.0"])
async def test_postgres_source_at_tallys_own_database_is_refused(client, make_key, database_url, workspace, host):
    key = await make_key("admin,read")
    await refused(client, key, own_db_source(database_url, host))
    assert await imported_rows(database_url, workspace) == 0
    resp = await client.get("/v1/events?event=stolen_key", headers=bearer(key))
    assert (await resp.json())["data"] == []


async def test_tallys_own_database_stays_refused_in_production_even_when_allow_listed(
        production, make_key, database_url, workspace):
    client = await production(sources_allow_hosts=("127.0.0.0/8", "::1/128", "localhost"))
    key = await make_key("admin,read")
    await refused(client, key, own_db_source(database_url))
    assert await imported_rows(database_url, workspace) == 0


async def test_redis_server_is_refused_when_tally_uses_redis(make_client, settings, make_key, redis_url):
    redis = urlparse(redis_url)
    if redis.scheme == "unix":
        pytest.skip("Redis reached over a Unix socket has no address to protect")
    client = await make_client(dataclasses.replace(settings, redis_url=redis_url))
    key = await make_key("admin,read")
    await refused(client, key, {"name": "r", "type": "mysql", "credentials": {
        "host": redis.hostname, "port": redis.port or 6379, "database": "x", "username": "u",
        "password": "redis-probe-pw"}})


@pytest.mark.parametrize("make_source", [stripe_source, hubspot_source, salesforce_source])
async def test_http_base_url_at_tallys_own_database_is_refused(client, make_key, database_url, make_source):
    db = urlparse(database_url)
    key = await make_key("admin,read")
    await refused(client, key, make_source(f"http://{db.hostname}:{db.port or 5432}"))
    await refused(client, key, make_source(f"http://localhost:{db.port or 5432}"))


@pytest.mark.parametrize(("make_source", "path"), [
    (stripe_source, "/v1/customers"), (hubspot_source, "/crm/v3/objects/contacts"),
    (salesforce_source, "/services/data/v61.0/sobjects/Account/describe")])
async def test_http_redirect_to_tallys_own_database_is_refused(client, make_key, database_url, make_source, path):
    db = urlparse(database_url)
    target = f"http://{db.hostname}:{db.port or 5432}{path}"
    app = web.Application()
    app.router.add_get(path, redirect_to(target))
    server = await serve(app)
    try:
        key = await make_key("admin,read")
        await refused(client, key, make_source(base_url(server)))
    finally:
        await server.close()


# --- production: internal addresses refused unless allowed -------------------------------------------

@pytest.mark.parametrize("url", ["http://169.254.169.254", "http://10.1.2.3:8080", "http://192.168.0.10",
                                 "http://100.64.0.1", "http://[fd00::1]", "http://[fe80::1]", "http://0.0.0.0:81",
                                 "http://[::ffff:169.254.169.254]", "http://224.0.0.1"])
async def test_production_refuses_private_and_link_local_base_urls(production, make_key, url):
    client = await production()
    key = await make_key("admin,read")
    await refused(client, key, stripe_source(url))
    await refused(client, key, hubspot_source(url))
    await refused(client, key, salesforce_source(url))


async def test_production_refuses_loopback_by_address_and_by_name(production, make_key, stripe):
    client = await production()
    key = await make_key("admin,read")
    await refused(client, key, stripe_source(stripe))
    await refused(client, key, stripe_source(stripe.replace("127.0.0.1", "localhost")))
    await refused(client, key, hubspot_source(stripe.replace("127.0.0.1", "localhost")))
    await refused(client, key, salesforce_source(stripe.replace("127.0.0.1", "localhost")))
    await refused(client, key, {"name": "db", "type": "mysql", "credentials": {
        "host": "localhost", "port": 3306, "database": "mysql", "username": "root", "password": ""}})


async def test_production_refuses_sql_warehouse_on_loopback(production, make_key, scratch_pg):  # noqa: F811
    database, _, port = scratch_pg
    client = await production()
    key = await make_key("admin,read")
    await refused(client, key, pg_source(database, port))


@pytest.mark.parametrize("allow", [("127.0.0.1/32", "::1/128"), ("localhost",)])
async def test_allow_list_lets_on_premises_hosts_through(production, make_key, stripe, scratch_pg, allow):  # noqa: F811
    url = stripe if "/" in allow[0] else stripe.replace("127.0.0.1", "localhost")
    key = await make_key("admin,read")
    await refused(await production(), key, stripe_source(url))  # not without the allow-list
    client = await production(sources_allow_hosts=allow)
    created = await create(client, key, stripe_source(url))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    database, conn, port = scratch_pg
    await add_signups(conn, ("u1", "free", "2024-03-01T10:00:00Z"))
    source = pg_source(database, port)
    source["credentials"]["host"] = "127.0.0.1" if "/" in allow[0] else "localhost"
    created = await create(client, key, source)
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    assert body["rows_imported"] == 1


async def test_production_redirect_from_an_allowed_host_to_a_loopback_address_is_refused(production, make_key, stripe):
    # localhost is allowed by name; the redirect goes to another loopback address by IP literal.
    target = urlparse(stripe)
    app = web.Application()
    app.router.add_get("/v1/customers", redirect_to(f"http://127.0.0.2:{target.port}/v1/customers"))
    server = await serve(app)
    try:
        client = await production(sources_allow_hosts=("localhost",))
        key = await make_key("admin,read")
        await refused(client, key, stripe_source(base_url(server).replace("127.0.0.1", "localhost")))
    finally:
        await server.close()


# --- status_reason is no port scanner -----------------------------------------------------------------

async def test_connection_failures_do_not_echo_socket_errors(client, make_key, stripe):
    key = await make_key("admin,read")
    name = secrets.token_hex(3)
    for body, reason in [
        ({"name": "p", "type": "postgres", "credentials": {"host": "127.0.0.1", "port": 1, "database": "d",
                                                            "username": "u", "password": "p"}},
         "could not connect to 127.0.0.1:1"),
        ({"name": "m", "type": "mysql", "credentials": {"host": "127.0.0.1", "port": 1, "database": "d",
                                                         "username": "u", "password": "p"}},
         "could not connect to 127.0.0.1:1"),
        (stripe_source("http://127.0.0.1:1"), "could not reach Stripe at http://127.0.0.1:1"),
        # An open port that does not speak the protocol reads the same as a closed one.
        ({"name": "p2", "type": "postgres", "credentials": {"host": "127.0.0.1", "port": urlparse(stripe).port,
                                                             "database": "d", "username": "u", "password": "p"}},
         f"could not connect to 127.0.0.1:{urlparse(stripe).port}"),
        ({"name": "p3", "type": "postgres", "credentials": {"host": f"no-such-{name}.invalid", "port": 5432,
                                                             "database": "d", "username": "u", "password": "p"}},
         f"could not connect to no-such-{name}.invalid:5432"),
    ]:
        created = await create(client, key, body)
        result = await wait_status(client, key, created["id"], "error", tries=600)
        assert result["status_reason"] == reason, result


# --- the policy itself, and its helpers for other connectors ------------------------------------------

def test_policy_judges_embedded_ipv4_and_production_ranges():
    guard = NetGuard.build(production=True, own_services=[("127.0.0.1", 5432)], allow=["203.0.113.0/24"])
    assert str(canonical("::ffff:10.0.0.1")) == "10.0.0.1"
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1",
                    "169.254.169.254", "fe80::1", "fd12::1", "100.64.0.1", "0.0.0.0", "::", "224.0.0.1",
                    "2002:a00:1::", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1"):
        assert not guard.allowed("", address, 443), address
    assert guard.allowed("", "8.8.8.8", 443) and guard.allowed("", "203.0.113.7", 443)
    dev = NetGuard.build(production=False, own_services=[("127.0.0.1", 5432)])
    assert dev.allowed("", "127.0.0.1", 5433) and dev.allowed("", "10.0.0.1", 5432)
    assert not dev.allowed("", "127.0.0.1", 5432) and not dev.allowed("", "::ffff:127.0.0.9", 5432)
    assert not dev.allowed("", "::1", 5432) and not dev.allowed("", "0.0.0.0", 5432)


async def test_resolve_refuses_a_name_with_a_forbidden_address(database_url):
    db = urlparse(database_url)
    guard = NetGuard.build(production=False, own_services=[(db.hostname, db.port or 5432)])
    with pytest.raises(DestinationRefused) as refusal:
        await guard.resolve("localhost", db.port or 5432)
    assert str(refusal.value) == REFUSED
    assert await guard.resolve("127.0.0.1", 5433) == ["127.0.0.1"]
    with pytest.raises(SourceError, match=r"^could not connect to nowhere\.invalid:80$"):
        await guard.resolve("nowhere.invalid", 80)


async def test_requests_session_for_vendor_sdks_checks_every_connection(stripe):
    guard = NetGuard.build(production=False, own_services=[("127.0.0.1", urlparse(stripe).port)])
    allowed = NetGuard.build(production=False, own_services=[])

    def call(g: NetGuard, url: str) -> requests.Response:
        with g.requests_session() as session:
            return session.get(url, headers={"Authorization": f"Bearer {STRIPE_KEY}"}, timeout=10)

    assert (await asyncio.to_thread(call, allowed, f"{stripe}/v1/customers")).status_code == 200
    with pytest.raises(DestinationRefused):
        await asyncio.to_thread(call, guard, f"{stripe}/v1/customers")
    with pytest.raises(DestinationRefused):
        await asyncio.to_thread(call, guard, stripe.replace("127.0.0.1", "localhost") + "/v1/customers")


def test_analytics_server_from_the_environment_is_refused(monkeypatch, settings):
    monkeypatch.setenv("TALLY_ANALYTICS_URL", "http://127.0.0.1:8123/?database=tally")
    guard = NetGuard.from_settings(settings)
    assert not guard.allowed("", "127.0.0.1", 8123) and not guard.allowed("localhost", "::1", 8123)
    assert guard.allowed("", "127.0.0.1", 8124)
    db = urlparse(settings.database_url)
    assert not guard.allowed("", "127.0.0.1", db.port or 5432)  # and the database, from settings


@pytest.mark.parametrize(("url", "port"), [("http://127.0.0.1", 8123), ("https://127.0.0.1", 8443),
                                           ("https://127.0.0.1:9440", 9440)])
def test_analytics_server_is_refused_on_the_port_its_client_uses(settings, url, port):
    # A URL without a port: the store's client goes to ClickHouse's HTTP port (8123, or 8443 over TLS),
    # not to HTTP's 80/443, so that is the port no source may reach, allow-listed or not.
    guard = NetGuard.from_settings(dataclasses.replace(settings, analytics_url=url, env="production",
                                                       sources_allow_hosts=("127.0.0.1",)))
    assert not guard.allowed("", "127.0.0.1", port)
    assert guard.allowed("", "127.0.0.1", 8080)
