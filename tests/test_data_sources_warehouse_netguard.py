"""The data-source network policy covers every connection of the BigQuery, Snowflake and Salesforce
connectors: BigQuery's API and its key's token_uri, Snowflake's host, Salesforce's login host and the
instance its token answer names. Tally's own database is refused in every mode; loopback in production."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from app.sources.netguard import REFUSED
from tests.conftest import bearer
from tests.fake_bigquery import FakeBigQuery, new_service_account
from tests.fake_peers import base_url, serve
from tests.fake_salesforce import FakeSalesforce
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_bigquery import bq_source
from tests.test_data_sources_netguard import production  # noqa: F401 (fixture)
from tests.test_data_sources_snowflake import snow_source


def own_db(database_url: str) -> str:
    db = urlparse(database_url)
    return f"http://{db.hostname}:{db.port or 5432}"


async def refused(client, key: str, body: dict) -> None:
    created = await create(client, key, body)
    result = await wait_status(client, key, created["id"], "active", "error", tries=600)
    assert result["status"] == "error", result
    assert result["status_reason"] == REFUSED


@pytest.fixture
async def bigquery_fake():
    fake = FakeBigQuery()
    server = await serve(fake.app())
    yield fake, base_url(server)
    await server.close()


@pytest.mark.parametrize("where", ["api", "token_uri"])
async def test_bigquery_api_and_token_uri_at_tallys_own_database_are_refused(client, make_key, database_url,
                                                                            bigquery_fake, where):
    fake, url = bigquery_fake
    key, public = new_service_account(f"{own_db(database_url) if where == 'token_uri' else url}/token")
    fake.public_keys.append(public)
    source = bq_source(own_db(database_url) if where == "api" else url, key)
    admin = await make_key("admin,read")
    await refused(client, admin, source)
    if where == "api":
        assert fake.token_requests == 1  # the token came from the fake; the API call was refused
    else:
        assert fake.token_requests == 0 and fake.queries == []


async def test_bigquery_on_loopback_is_refused_in_production(production, make_key, bigquery_fake):  # noqa: F811
    fake, url = bigquery_fake
    key, public = new_service_account(f"{url}/token")
    fake.public_keys.append(public)
    client = await production()
    await refused(client, await make_key("admin,read"), bq_source(url, key))
    assert fake.token_requests == 0


async def test_snowflake_host_is_checked(client, production, make_key, database_url):  # noqa: F811
    admin = await make_key("admin,read")
    await refused(client, admin, snow_source(own_db(database_url), "DB"))
    prod = await production()
    await refused(prod, admin, snow_source("http://127.0.0.1:8443", "DB"))
    await refused(prod, admin, snow_source("https://localhost", "DB"))


async def test_snowflake_https_name_outside_snowflake_is_refused_even_in_development(client, make_key):
    """Over https the connector connects by name, after the check: a name whose DNS the tenant controls
    could answer differently by then, so only Snowflake's own domain (or an allow-listed host) is used."""
    admin = await make_key("admin,read")
    await refused(client, admin, snow_source("https://localhost:8443", "DB"))


async def test_snowflake_account_cannot_smuggle_another_host(client, make_key):
    admin = await make_key("admin,read")
    for account in ("evil.example/x?", "evil.example#", "user@evil.example", "evil.example:8443"):
        body = snow_source("", "DB")
        body["credentials"]["account"] = account
        del body["options"]["base_url"]
        resp = await client.post("/v1/data-sources", json=body, headers=bearer(admin))
        assert resp.status == 400, (account, await resp.text())
    assert (await (await client.get("/v1/data-sources", headers=bearer(admin))).json())["data"] == []


async def test_salesforce_instance_from_the_token_answer_is_checked(client, make_key, database_url):
    fake = FakeSalesforce()
    server = await serve(fake.app())
    try:
        fake.url = own_db(database_url)  # the token endpoint hands out Tally's own database as the instance
        admin = await make_key("admin,read")
        await refused(client, admin, {
            "name": "crm", "type": "salesforce", "options": {"base_url": base_url(server), "table": "Account"},
            "credentials": {"client_id": fake.client_id, "client_secret": fake.client_secret,
                            "refresh_token": fake.refresh_token}})
        await refused(client, admin, {
            "name": "crm", "type": "salesforce", "options": {"table": "Account"},
            "credentials": {"access_token": fake.access_token, "instance_url": own_db(database_url)}})
        assert fake.requests == 0
        resp = await client.get("/v1/events?limit=10", headers=bearer(admin))
        assert (await resp.json())["data"] == []
    finally:
        await server.close()
