"""Sharing: POST/DELETE /v1/dashboards/{id}/share and the key-less /public/dashboards/{token} views."""

from urllib.parse import urlparse

from tests.conftest import bearer


async def _shared(client, key):
    made = await (await client.post("/v1/dashboards", headers=bearer(key), json={
        "name": "Launch", "description": "public numbers",
        "charts": [{"title": "Signups", "type": "bar", "event": "signup"},
                   {"title": "Plans", "type": "pie", "event": "signup", "group_by": "plan"}]})).json()
    resp = await client.post(f"/v1/dashboards/{made['id']}/share", headers=bearer(key))
    assert resp.status == 200, await resp.text()
    return made, await resp.json()


async def test_share_gives_a_working_public_url_and_unshare_revokes_it(client, make_key):
    key = await make_key("read,write")
    await client.post("/v1/events/batch", headers=bearer(key), json={"events": [
        {"event": "signup", "user_id": "u1", "timestamp": "2025-03-01T10:00:00Z", "properties": {"plan": "pro"}},
        {"event": "signup", "user_id": "u2", "timestamp": "2025-03-02T10:00:00Z", "properties": {"plan": "pro"}},
        {"event": "signup", "user_id": "u3", "timestamp": "2025-03-02T11:00:00Z", "properties": {}},
    ]})
    made, shared = await _shared(client, key)
    url = urlparse(shared["public_url"])
    assert url.scheme == "http" and url.netloc == f"{client.host}:{client.port}"
    assert url.path.startswith("/public/dashboards/") and len(url.path.rsplit("/", 1)[1]) >= 32
    assert shared["updated_at"] > made["updated_at"]
    got = await (await client.get(f"/v1/dashboards/{made['id']}", headers=bearer(key))).json()
    assert got["public_url"] == shared["public_url"]

    page = await client.get(url.path)  # no key
    assert page.status == 200 and page.content_type == "text/html"
    html = await page.text()
    assert "/public/assets/public_dashboard.js" in html and "http" not in html.split("<body>")[1]
    assert page.headers["Cache-Control"] == "no-store" and page.headers["Referrer-Policy"] == "no-referrer"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    for asset, kind in [("public_dashboard.js", "application/javascript"), ("public_dashboard.css", "text/css")]:
        resp = await client.get(f"/public/assets/{asset}")
        assert resp.status == 200 and resp.content_type == kind
    assert (await client.get("/public/assets/secrets.txt")).status == 404

    resp = await client.get(f"{url.path}/data?from=2025-03-01T00:00:00Z&to=2025-03-02T23:00:00Z")
    assert resp.status == 200
    body = await resp.json()
    assert body["dashboard"]["name"] == "Launch" and body["dashboard"]["description"] == "public numbers"
    assert "id" not in body["dashboard"] and "public_url" not in body["dashboard"]
    charts = body["dashboard"]["charts"]
    assert [c["title"] for c in charts] == ["Signups", "Plans"]
    assert [d["chart_id"] for d in body["data"]] == [c["id"] for c in charts]
    assert [p["value"] for p in body["data"][0]["series"][0]["points"]] == [1, 2]
    assert {s["name"]: s["points"][0]["value"] for s in body["data"][1]["series"]} == {"pro": 2, "(none)": 1}

    again = await (await client.post(f"/v1/dashboards/{made['id']}/share", headers=bearer(key))).json()
    assert again["public_url"] == shared["public_url"] and again["updated_at"] == shared["updated_at"]

    resp = await client.delete(f"/v1/dashboards/{made['id']}/share", headers=bearer(key))
    assert resp.status == 204
    assert (await client.get(url.path)).status == 404
    resp = await client.get(f"{url.path}/data")
    assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
    private = await (await client.get(f"/v1/dashboards/{made['id']}", headers=bearer(key))).json()
    assert private["public_url"] is None and private["updated_at"] > shared["updated_at"]

    reshared = await (await client.post(f"/v1/dashboards/{made['id']}/share", headers=bearer(key))).json()
    assert reshared["public_url"] != shared["public_url"]
    assert (await client.get(urlparse(reshared["public_url"]).path)).status == 200
    assert (await client.get(url.path)).status == 404


async def test_unknown_tokens_are_404(client):
    for token in ["nope", "a" * 32, "../../etc/passwd"]:
        resp = await client.get(f"/public/dashboards/{token}")
        assert resp.status == 404
        assert (await client.get(f"/public/dashboards/{token}/data")).status == 404


async def test_deleting_a_shared_dashboard_revokes_its_url(client, make_key):
    key = await make_key("read,write")
    made, shared = await _shared(client, key)
    await client.delete(f"/v1/dashboards/{made['id']}", headers=bearer(key))
    assert (await client.get(urlparse(shared["public_url"]).path)).status == 404


async def test_public_data_validates_its_range(client, make_key):
    key = await make_key("read,write")
    _, shared = await _shared(client, key)
    resp = await client.get(urlparse(shared["public_url"]).path + "/data?interval=minute")
    assert resp.status == 400


async def test_public_url_follows_a_trusted_proxy(make_client, settings, make_key):
    import dataclasses

    proxied = await make_client(dataclasses.replace(settings, trusted_proxies=("127.0.0.0/8",)))
    key = await make_key("read,write")
    made = await (await proxied.post("/v1/dashboards", headers=bearer(key), json={"name": "x"})).json()
    resp = await proxied.post(f"/v1/dashboards/{made['id']}/share", headers={
        **bearer(key), "X-Forwarded-Proto": "https", "X-Forwarded-Host": "stats.example.com"})
    assert (await resp.json())["public_url"].startswith("https://stats.example.com/public/dashboards/")
