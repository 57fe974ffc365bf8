"""HubSpot through its client library against the local fake: error texts, and tokens kept out of logs
(the library logs every answer's body when its debug switch is on; Tally leaves it off)."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import bearer
from tests.fake_peers import FakeHubSpot, base_url, serve
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_http import contact

AT = "2024-02-01T00:00:00.123Z"


@pytest.fixture
async def hubspot():
    fake = FakeHubSpot(access_token="hub-access-token-xyz")
    server = await serve(fake.app())
    yield fake, base_url(server)
    await server.close()


def source(fake: FakeHubSpot, url: str) -> dict:
    return {"name": "crm", "type": "hubspot", "options": {"base_url": url},
            "credentials": {"client_id": fake.client_id, "client_secret": fake.client_secret,
                            "refresh_token": fake.refresh_token}}


async def sync(client, key: str, source_id: str) -> dict:
    assert (await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))).status == 202
    return await wait_status(client, key, source_id, "active", "error")


async def test_tokens_never_reach_the_logs(client, make_key, hubspot, caplog):
    fake, url = hubspot
    fake.contacts = [contact(0, AT)]
    caplog.set_level(logging.DEBUG)
    key = await make_key("admin,read")
    created = await create(client, key, source(fake, url))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active", body
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    for secret in (fake.access_token, fake.refresh_token, fake.client_secret):
        assert secret not in logged


async def test_rejected_access_token_is_error(client, make_key, hubspot):
    _, url = hubspot
    key = await make_key("admin,read")
    created = await create(client, key, {"name": "crm", "type": "hubspot", "options": {"base_url": url},
                                         "credentials": {"access_token": "pat-na1-wrong-token"}})
    body = await wait_status(client, key, created["id"], "error")
    assert body["status_reason"] == "HubSpot rejected the credentials (HTTP 401)"


async def test_a_token_answer_without_an_access_token_is_error(client, make_key, hubspot):
    fake, url = hubspot
    fake.token_answer = {"status": "OK", "expires_in": 1800}
    key = await make_key("admin,read")
    created = await create(client, key, source(fake, url))
    body = await wait_status(client, key, created["id"], "error")
    assert body["status_reason"] == "HubSpot did not return an access token for the refresh token"
