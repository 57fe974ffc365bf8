from tests.conftest import bearer


async def test_event_roundtrip(client, make_key):
    key = await make_key()
    resp = await client.post("/v1/events", json={"event": "signup", "user_id": "u1"}, headers=bearer(key))
    assert resp.status == 200, await resp.text()
    listed = await (await client.get("/v1/events", headers=bearer(key))).json()
    assert [e["event"] for e in listed["data"]] == ["signup"]
