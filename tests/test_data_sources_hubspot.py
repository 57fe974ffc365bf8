"""HubSpot through its client library against the local fake: contacts updated in the cursor's own
millisecond after a sync, cursors stored before the cursor kept ids, and tokens kept out of logs (the
library logs every answer's body when its debug switch is on; Tally leaves it off)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from tests.conftest import bearer
from tests.fake_peers import FakeHubSpot
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_http import contact

AT = "2024-02-01T00:00:00.123Z"  # HubSpot's updatedAt has millisecond precision


def source(fake: FakeHubSpot, url: str) -> dict:
    return {"name": "crm", "type": "hubspot", "options": {"base_url": url},
            "credentials": {"client_id": fake.client_id, "client_secret": fake.client_secret,
                            "refresh_token": fake.refresh_token}}


async def sync(client, key: str, source_id: str) -> dict:
    assert (await client.post(f"/v1/data-sources/{source_id}/sync", headers=bearer(key))).status == 202
    return await wait_status(client, key, source_id, "active", "error")


def changed(n: int, updated: str, company: str) -> dict:
    base = contact(n, updated)
    return {**base, "properties": {**base["properties"], "company": company}}


async def test_contacts_updated_in_the_cursors_millisecond_after_a_sync_are_merged(client, make_key, hubspot):
    fake, url = hubspot
    fake.contacts = [contact(0, AT), contact(1, AT)]
    key = await make_key("admin,read")
    created = await create(client, key, source(fake, url))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active" and body["rows_imported"] == 2, body

    # Written after that sync, in the same millisecond it ended on: a new contact and a changed one.
    fake.contacts = [contact(0, AT), changed(1, AT, "Globex"), contact(2, AT)]
    body = await sync(client, key, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 4, body  # contact 0, unchanged, not again
    assert (await (await client.get("/v1/users/101", headers=bearer(key))).json())["traits"]["company"] == "Globex"
    assert (await client.get("/v1/users/102", headers=bearer(key))).status == 200

    body = await sync(client, key, created["id"])
    assert body["rows_imported"] == 4, body  # nothing changed: nothing counted


def _ms(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def test_a_contact_updated_after_the_listing_passed_it_is_merged_next_time(client, make_key, hubspot):
    # Contacts are listed in id order: contact 0, listed on the first page, is updated while the listing
    # goes on, and contact 100, on the second page, later still. The cursor must not pass contact 0's update.
    fake, url = hubspot
    old = _ms(datetime.now(UTC) - timedelta(hours=1))
    fake.contacts = [contact(n, old) for n in range(101)]  # two pages of 100

    firsts = []

    def meanwhile(offset: int) -> None:
        firsts.extend([offset] if offset == 0 else [])
        if len(firsts) == 2 and offset == 0:  # the sync's first page (the first is the source's check)
            now = datetime.now(UTC)
            fake.contacts[0] = changed(0, _ms(now - timedelta(seconds=2)), "Globex")
            fake.contacts[100] = changed(100, _ms(now - timedelta(seconds=1)), "Initech")

    fake.after_page = meanwhile
    key = await make_key("admin,read")
    created = await create(client, key, source(fake, url))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["status"] == "active" and body["rows_imported"] == 101, body
    company = "/v1/users/100"
    assert (await (await client.get(company, headers=bearer(key))).json())["traits"]["company"] == "Acme"

    body = await sync(client, key, created["id"])
    assert (await (await client.get(company, headers=bearer(key))).json())["traits"]["company"] == "Globex"
    assert body["rows_imported"] == 102, body  # contact 0 again; contact 100 unchanged, not counted twice
    body = await sync(client, key, created["id"])
    assert body["rows_imported"] == 102, body


async def test_a_cursor_stored_as_a_timestamp_is_read_as_before(client, make_key, hubspot, pool):
    fake, url = hubspot
    fake.contacts = [contact(0, AT)]
    key = await make_key("admin,read")
    created = await create(client, key, source(fake, url))
    body = await wait_status(client, key, created["id"], "active", "error")
    assert body["rows_imported"] == 1, body
    # The format an earlier Tally stored: the newest updatedAt as ISO text, contacts at it not re-read.
    await pool.execute("UPDATE data_sources SET sync_cursor = to_jsonb($2::text) WHERE id = $1", created["id"],
                       "2024-02-01T00:00:00.123000+00:00")
    fake.contacts = [contact(0, AT), changed(1, "2024-02-01T00:00:00.124Z", "Globex")]
    body = await sync(client, key, created["id"])
    assert body["status"] == "active" and body["rows_imported"] == 2, body
    # From then on the cursor keeps the ids at its millisecond.
    fake.contacts.append(contact(2, "2024-02-01T00:00:00.124Z"))
    body = await sync(client, key, created["id"])
    assert body["rows_imported"] == 3, body
    assert (await client.get("/v1/users/102", headers=bearer(key))).status == 200


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
