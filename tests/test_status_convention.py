"""The documented status-code convention where the specs are silent (docs/decisions.md): creating a
resource with an id of its own answers 201 with it; the spec keeps POST /api/sites at 200; deleting
answers 204; other actions 200."""

from tests.conftest import bearer
from tests.site_helpers import unique_domain

VOLUME = {"name": "Signups", "type": "event_volume", "config": {"events": ["signup"]}}


async def test_creation_answers_201_with_the_resource_except_where_the_spec_fixes_200(client, make_key, login):
    key = bearer(await make_key("read,write"))
    created = {}
    for name, path, body in [
        ("dashboard", "/v1/dashboards", {"name": "Growth"}),
        ("report", "/v1/reports", VOLUME),
    ]:
        resp = await client.post(path, headers=key, json=body)
        assert resp.status == 201, (name, await resp.text())
        created[name] = (await resp.json())["id"]
    dash = f"/v1/dashboards/{created['dashboard']}"
    chart = await client.post(f"{dash}/charts", headers=key, json={"title": "t", "type": "line", "event": "signup"})
    assert chart.status == 201 and (await chart.json())["id"].startswith("chrt_")
    share = await client.post(f"{dash}/share", headers=key)
    assert share.status == 200  # an action on an existing resource
    assert (await client.delete(f"/v1/reports/{created['report']}", headers=key)).status == 204

    await login()
    api_key = await client.post("/api/keys", json={"name": "backend", "scopes": ["write"]})
    assert api_key.status == 201 and (await api_key.json())["id"]
    site = await client.post("/api/sites", data={"domain": unique_domain()})
    assert site.status == 200  # fixed by the site spec
