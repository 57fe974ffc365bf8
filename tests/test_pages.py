"""HTML pages and static assets of the dashboard."""


async def test_root_redirects_by_session(client, login):
    resp = await client.get("/", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/login"
    await login()
    resp = await client.get("/", allow_redirects=False)
    assert resp.status == 302 and resp.headers["Location"] == "/app"


async def test_app_pages_need_a_session(client, login):
    resp = await client.get("/app/sites/abc/events?range=30d", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == "/login?next=/app/sites/abc/events?range=30d"
    login_page = await client.get("/login")
    assert login_page.status == 200
    assert "text/html" in login_page.headers["Content-Type"]
    assert 'id="login-form"' in await login_page.text()
    await login()
    for path in ("/app", "/app/keys", "/app/sites/abc", "/app/sites/abc/realtime"):
        resp = await client.get(path)
        assert resp.status == 200, path
        body = await resp.text()
        assert '<main id="view"' in body and "/static/js/main.js" in body
        assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
        assert resp.headers["X-Frame-Options"] == "DENY"
    assert (await client.get("/login", allow_redirects=False)).headers["Location"] == "/app"


async def test_static_assets_are_served_locally(client):
    assets = (("/static/js/main.js", "javascript"), ("/static/css/app.css", "text/css"),
              ("/static/vendor/uPlot.iife.min.js", "javascript"), ("/static/vendor/uPlot.min.css", "text/css"))
    for path, kind in assets:
        resp = await client.get(path)
        assert resp.status == 200, path
        assert kind in resp.headers["Content-Type"], path
        assert "ETag" in resp.headers or "Last-Modified" in resp.headers
    assert (await client.get("/static/package.json")).status == 404
    assert (await client.get("/static/js/../../views/pages.py")).status in (403, 404)


async def test_pages_reference_no_external_hosts(client, login):
    await login()
    for path in ("/login", "/app"):
        body = await (await client.get(path)).text()
        assert "http://" not in body and "https://" not in body, path
