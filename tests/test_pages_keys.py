"""Session-authenticated API-key management: /api/keys."""

import asyncio
import dataclasses

from tests.conftest import bearer


async def test_key_routes_need_a_session(client):
    for method, path in (("GET", "/api/keys"), ("POST", "/api/keys"), ("DELETE", "/api/keys/key_x")):
        resp = await client.request(method, path, json={"name": "x", "scopes": ["read"]})
        assert resp.status == 401, path
        assert await resp.json() == {"error": "unauthorized"}


async def test_create_shows_the_key_once_and_it_works_on_v1(client, login):
    await login()
    resp = await client.post("/api/keys", json={"name": "backend", "scopes": ["write", "read"]})
    assert resp.status == 201
    assert resp.headers["Cache-Control"] == "no-store"
    created = await resp.json()
    raw = created["key"]
    assert raw.startswith("tally_live_sk_")
    assert created["name"] == "backend" and created["env"] == "live" and created["status"] == "active"
    assert created["scopes"] == ["read", "write"]
    assert raw.startswith(created["prefix"]) and created["id"].startswith("key")
    assert created["revokedAt"] is None and created["createdAt"].endswith("Z")

    v1 = await client.get("/v1/events", headers=bearer(raw))
    assert v1.status == 200

    listed = await (await client.get("/api/keys")).json()
    assert [k["id"] for k in listed["keys"]] == [created["id"]]
    assert "key" not in listed["keys"][0]
    assert raw not in str(listed)


async def test_test_key_and_listing_is_workspace_scoped(client, login, make_client, settings):
    await login()
    resp = await client.post("/api/keys", json={"name": "ci", "scopes": ["read"], "test": True})
    assert resp.status == 201
    assert (await resp.json())["key"].startswith("tally_test_sk_")
    other = await make_client(settings)
    await login(workspace_name="someone-else-" + str(id(other)), the_client=other)
    assert (await (await other.get("/api/keys")).json()) == {"keys": []}
    key_id = (await (await client.get("/api/keys")).json())["keys"][0]["id"]
    # A key of another workspace cannot be revoked from here.
    assert (await other.delete(f"/api/keys/{key_id}")).status == 404
    assert (await (await client.get("/api/keys")).json())["keys"][0]["status"] == "active"


async def test_invalid_bodies_are_400(client, login):
    await login()
    for body in ({"scopes": ["read"]}, {"name": "x", "scopes": []}, {"name": "x", "scopes": ["root"]},
                 {"name": "   ", "scopes": ["read"]}, {"name": "x" * 65, "scopes": ["read"]},
                 {"name": "x", "scopes": ["read"], "expiresAt": "2001-01-01T00:00:00Z"},
                 {"name": "x", "scopes": ["read"], "extra": 1}):
        resp = await client.post("/api/keys", json=body)
        assert resp.status == 400, body
        data = await resp.json()
        assert data["error"] == "invalid payload" and data["issues"], body
    resp = await client.post("/api/keys", data=b"{nope", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and (await resp.json()) == {"error": "invalid json"}
    resp = await client.post("/api/keys", data={"name": "form", "scopes": "read"})
    assert resp.status == 415 and (await resp.json()) == {"error": "content-type must be application/json"}
    assert (await (await client.get("/api/keys")).json()) == {"keys": []}


async def test_key_issues_name_their_field_and_expiry_takes_the_api_timestamp_forms(client, login):
    """The site API's one issue shape, {field, message}, as ingestion's and the goals' issues (they were
    msgspec's sentences); and expiresAt read by the API's one timestamp parser, which takes
    `2030-01-01T10:00Z` (no seconds) and `+0200` offsets as every keyed timestamp does."""
    await login()
    for body, field in (({"scopes": ["read"]}, "name"), ({"name": "x", "scopes": ["root"]}, "scopes[0]"),
                        ({"name": "  ", "scopes": ["read"]}, "name"), ({"name": "x", "scopes": ["read"], "extra": 1},
                                                                      "extra"),
                        ({"name": "x", "scopes": ["read"], "expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
                        ({"name": "x", "scopes": ["read"], "expiresAt": "2030-01-01T10:00"}, "expiresAt"),
                        ({"name": "x", "scopes": ["read"], "expiresAt": "soon"}, "expiresAt"),
                        # year 10000 in UTC: a 500 when stored
                        ({"name": "x", "scopes": ["read"], "expiresAt": "9999-12-31T23:59:59-14:00"}, "expiresAt"),
                        # PostgreSQL's text cannot hold U+0000: a 500 when stored (found by schemathesis)
                        ({"name": "a\u0000b", "scopes": ["read"]}, "name")):
        data = await (await client.post("/api/keys", json=body)).json()
        assert data["error"] == "invalid payload", body
        assert [i["field"] for i in data["issues"]] == [field] and all(i["message"] for i in data["issues"]), data
    for sent, stored in (("2030-01-01T10:00Z", "2030-01-01T10:00:00.000Z"),
                         ("2030-01-01T10:00:00+0200", "2030-01-01T08:00:00.000Z")):
        resp = await client.post("/api/keys", json={"name": "x", "scopes": ["read"], "expiresAt": sent})
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["expiresAt"] == stored


async def test_revoke_stops_the_key_on_v1(client, login, make_client, settings):
    # A second app on the same database stands for another process with its own key cache.
    short = dataclasses.replace(settings, key_cache_seconds=0.2)
    other = await make_client(short)
    await login()
    created = await (await client.post("/api/keys", json={"name": "gone", "scopes": ["read"]})).json()
    raw = created["key"]
    assert (await client.get("/v1/events", headers=bearer(raw))).status == 200
    assert (await other.get("/v1/events", headers=bearer(raw))).status == 200  # now cached there

    resp = await client.delete(f"/api/keys/{created['id']}")
    assert resp.status == 200
    revoked = await resp.json()
    assert revoked["status"] == "revoked" and revoked["revokedAt"] is not None and "key" not in revoked

    # This process forgets the key at once.
    denied = await client.get("/v1/events", headers=bearer(raw))
    assert denied.status == 401
    # The other process within its cache TTL.
    for _ in range(100):
        status = (await other.get("/v1/events", headers=bearer(raw))).status
        if status == 401:
            break
        await asyncio.sleep(0.05)
    assert status == 401

    listed = (await (await client.get("/api/keys")).json())["keys"]
    assert listed[0]["status"] == "revoked"
    # Revoking again keeps the first revocation time.
    again = await (await client.delete(f"/api/keys/{created['id']}")).json()
    assert again["revokedAt"] == revoked["revokedAt"]
    assert (await client.delete("/api/keys/key_does_not_exist")).status == 404


async def test_a_body_arriving_in_pieces_is_read_whole(client, login):
    """A browser or proxy may send the JSON in several packets: the key is made from all of them."""
    await login()

    async def pieces():
        for piece in (b'{"name": "in pi', b'eces", "scop', b'es": ["read"]}'):
            yield piece
            await asyncio.sleep(0.05)  # lets the server see each piece on its own

    resp = await client.post("/api/keys", data=pieces(), headers={"Content-Type": "application/json"})
    assert resp.status == 201, await resp.text()
    assert [k["name"] for k in (await (await client.get("/api/keys")).json())["keys"]] == ["in pieces"]
    resp = await client.post("/api/keys", data=b'{"name": "' + b"x" * 20000 + b'", "scopes": ["read"]}',
                             headers={"Content-Type": "application/json"})
    assert resp.status == 413 and (await resp.json())["error"] == "payload too large"
