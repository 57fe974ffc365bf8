"""The router, walked: every route sits in the application it belongs to, every /v1 handler declares how
it authenticates (and enforces it), every /api handler is key-less ingestion, a read by a Tally key
(Plausible's Stats and Sites APIs) or runs under the dashboard session, and refuses a request without its
credential. A route added without a line here fails."""

import dataclasses
import itertools

import pytest
from aiohttp import web

from app import server
from app.auth import declared_access, refuse_undeclared
from app.server import init_app
from tests.conftest import bearer

V1 = {
    ("POST", "/v1/events"): "scope:write",
    ("POST", "/v1/events/batch"): "scope:write",
    ("GET", "/v1/events"): "scope:read",
    ("POST", "/v1/identify"): "segment|scope:write",
    ("GET", "/v1/users"): "scope:read",
    ("GET", "/v1/users/{user_id}"): "scope:read",
    ("DELETE", "/v1/users/{user_id}"): "scope:admin",
    ("GET", "/v1/dashboards"): "scope:read",
    ("POST", "/v1/dashboards"): "scope:read,write",
    ("GET", "/v1/dashboards/{id}"): "scope:read",
    ("PATCH", "/v1/dashboards/{id}"): "scope:read,write",
    ("DELETE", "/v1/dashboards/{id}"): "scope:write",
    ("POST", "/v1/dashboards/{id}/charts"): "scope:read,write",
    ("PATCH", "/v1/dashboards/{id}/charts/{chart_id}"): "scope:read,write",
    ("DELETE", "/v1/dashboards/{id}/charts/{chart_id}"): "scope:write",
    ("GET", "/v1/dashboards/{id}/charts/{chart_id}/data"): "scope:read",
    ("POST", "/v1/dashboards/{id}/share"): "scope:read,write",
    ("DELETE", "/v1/dashboards/{id}/share"): "scope:write",
    ("GET", "/v1/data-sources"): "scope:read",
    ("POST", "/v1/data-sources"): "scope:admin",
    ("GET", "/v1/data-sources/{id}"): "scope:read",
    ("DELETE", "/v1/data-sources/{id}"): "scope:admin",
    ("POST", "/v1/data-sources/{id}/pause"): "scope:admin",
    ("POST", "/v1/data-sources/{id}/resume"): "scope:admin",
    ("POST", "/v1/data-sources/{id}/sync"): "scope:admin",
    ("POST", "/v1/reports"): "scope:write",
    ("GET", "/v1/reports"): "scope:read",
    ("GET", "/v1/reports/{id}"): "scope:read",
    ("PATCH", "/v1/reports/{id}"): "scope:write",
    ("DELETE", "/v1/reports/{id}"): "scope:write",
    ("GET", "/v1/reports/{id}/run"): "scope:read",
    ("POST", "/v1/track"): "segment",
    ("POST", "/v1/page"): "segment",
    ("POST", "/v1/screen"): "segment",
    ("POST", "/v1/group"): "segment",
    ("POST", "/v1/alias"): "segment",
    ("POST", "/v1/batch"): "segment",
    ("POST", "/v1/import"): "segment",
    ("POST", "/v1/import/"): "segment",
    ("POST", "/v1/t"): "segment",
    ("POST", "/v1/i"): "segment",
    ("POST", "/v1/p"): "segment",
    ("POST", "/v1/s"): "segment",
    ("POST", "/v1/g"): "segment",
    ("POST", "/v1/a"): "segment",
    ("POST", "/v1/b"): "segment",
    ("GET", "/v1/projects/{write_key}/settings"): "segment",
    # analytics.js's preflights: a browser sends them without credentials (app.views.segment.preflight).
    **{("OPTIONS", f"/v1/{path}"): "segment" for path in (
        "track", "page", "screen", "group", "alias", "identify", "batch", "t", "i", "p", "s", "g", "a", "b",
        "import", "import/")},
}

API = {
    ("POST", "/api/auth/login"): "session",
    ("POST", "/api/auth/logout"): "session",
    ("GET", "/api/auth/me"): "session",
    ("GET", "/api/keys"): "session",
    ("POST", "/api/keys"): "session",
    ("DELETE", "/api/keys/{key_id}"): "session",
    ("GET", "/api/analytics/overview"): "session",
    ("GET", "/api/analytics/timeseries"): "session",
    ("GET", "/api/analytics/breakdown"): "session",
    ("GET", "/api/analytics/has-values"): "session",
    ("GET", "/api/analytics/property-keys"): "session",
    ("GET", "/api/analytics/top-pages"): "session",
    ("GET", "/api/analytics/top-referrers"): "session",
    ("GET", "/api/analytics/top-countries"): "session",
    ("GET", "/api/analytics/events"): "session",
    ("GET", "/api/analytics/export"): "session",
    ("POST", "/api/service/event"): "ingestion",
    ("OPTIONS", "/api/service/event"): "ingestion",
    ("GET", "/api/analytics/realtime"): "session",
    ("GET", "/api/sites"): "session",
    ("POST", "/api/sites"): "session",
    ("PATCH", "/api/sites/{site_id}"): "session",
    ("GET", "/api/verify"): "session",
    ("POST", "/api/verify"): "session",
    ("POST", "/api/event"): "ingestion",
    ("OPTIONS", "/api/event"): "ingestion",
    ("GET", "/api/sites/{site_id}/goals"): "session",
    ("POST", "/api/sites/{site_id}/goals"): "session",
    ("DELETE", "/api/sites/{site_id}/goals"): "session",
    ("DELETE", "/api/sites/{site_id}/goals/{goal_id}"): "session",
    ("GET", "/api/sites/{site_id}/shared-links"): "session",
    ("POST", "/api/sites/{site_id}/shared-links"): "session",
    ("PATCH", "/api/sites/{site_id}/shared-links/{link_id}"): "session",
    ("DELETE", "/api/sites/{site_id}/shared-links/{link_id}"): "session",
    # Plausible's Stats and Sites APIs: a Tally key with the read scope, no session (app/views/stats_api.py).
    ("POST", "/api/v2/query"): "bearer",
    ("GET", "/api/v1/stats/aggregate"): "bearer",
    ("GET", "/api/v1/stats/timeseries"): "bearer",
    ("GET", "/api/v1/stats/breakdown"): "bearer",
    ("GET", "/api/v1/stats/realtime/visitors"): "bearer",
    ("GET", "/api/v1/sites"): "bearer",
    ("GET", "/api/v1/sites/{site_id}"): "bearer",
}

ROOT = {
    ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/openapi.json"),
    ("GET", "/public/dashboards/{token}"), ("GET", "/public/dashboards/{token}/data"),
    ("GET", "/public/assets/{name}"), ("GET", "/"), ("GET", "/login"), ("GET", "/app"), ("GET", "/app/{tail}"),
    ("GET", "/tracker.js"), ("GET", "/share/{token}"), ("POST", "/share/{token}"), ("GET", "/static/css"),
    ("GET", "/static/js"), ("GET", "/static/vendor"),
}

# /api routes that run under the session but serve a visitor who has none.
API_WITHOUT_SIGN_IN = {("POST", "/api/auth/login"), ("POST", "/api/auth/logout")}


def _walk(app: web.Application) -> tuple[set, dict, dict]:
    root, v1, api = set(), {}, {}
    for resource in app.router.resources():
        info = resource.get_info()
        if "app" not in info:
            root.update((route.method, resource.canonical) for route in resource if route.method != "HEAD")
            continue
        for route in info["app"].router.routes():
            if route.method == "HEAD":
                continue
            key = (route.method, route.resource.canonical)
            if info["prefix"] == "/v1":
                v1[key] = declared_access(route.handler)
            else:
                assert info["prefix"] == "/api"
                api[key] = "ingestion" if getattr(route.handler, "tally_ingestion", False) else \
                    "bearer" if getattr(route.handler, "tally_bearer", False) else "session"
    return root, v1, api


def test_every_route_declares_its_access(settings):
    root, v1, api = _walk(init_app(settings))
    assert root == ROOT
    assert v1 == V1
    assert api == API


def test_a_v1_handler_without_a_declared_scope_stops_start_up(settings, monkeypatch):
    async def undeclared(request: web.Request) -> web.Response:
        return web.Response()

    original = server.setup_routes

    def with_extra(root, v1, api):
        original(root, v1, api)
        v1.router.add_get("/undeclared", undeclared)

    monkeypatch.setattr(server, "setup_routes", with_extra)
    with pytest.raises(RuntimeError, match="/undeclared declares no scope"):
        init_app(settings)
    lone = web.Application()
    lone.router.add_post("/x", undeclared)
    with pytest.raises(RuntimeError):
        refuse_undeclared(lone)


def _concrete(path: str) -> str:
    return path.replace("{tail}", "x/y").replace("{", "").replace("}", "")


@pytest.fixture
async def proxied(make_client, settings):
    # Each request names its own client address, so the anonymous per-IP allowance never answers first.
    return await make_client(dataclasses.replace(settings, trusted_proxies=("127.0.0.1/32",)))


async def test_every_v1_route_refuses_a_missing_key_and_a_missing_scope(proxied, make_key):
    addresses = (f"10.9.{i // 250}.{i % 250 + 1}" for i in itertools.count())
    keys = {scope: await make_key(",".join(s for s in ("read", "write", "admin") if s != scope))
            for scope in ("read", "write", "admin")}
    for (method, path), access in V1.items():
        if method == "OPTIONS":
            continue  # a CORS preflight never carries credentials (tests/test_segment_paths.py)
        url = _concrete(path)
        # Segment's calls may carry their write key in the body: give them one without it.
        payload = None
        if access.startswith("segment"):
            payload = b'{"batch": []}' if path.startswith(("/v1/batch", "/v1/import", "/v1/b")) else b"{}"
        resp = await proxied.request(method, url, data=payload, headers={"X-Forwarded-For": next(addresses)})
        assert resp.status == 401, (method, path, await resp.text())
        if access.startswith("segment"):
            continue  # Segment's write-keyed calls answer in their own way (tests/test_segment_api.py)
        assert (await resp.json())["error"]["code"] == "unauthorized", (method, path)
        first_scope = access.removeprefix("scope:").split(",")[0]
        resp = await proxied.request(method, url, headers={**bearer(keys[first_scope]),
                                                           "X-Forwarded-For": next(addresses)})
        assert resp.status == 403, (method, path, await resp.text())
        assert (await resp.json())["error"]["code"] == "forbidden"


async def test_every_signed_in_api_route_refuses_a_request_without_a_session(proxied):
    for (method, path), access in API.items():
        if access != "session" or (method, path) in API_WITHOUT_SIGN_IN:
            continue
        resp = await proxied.request(method, _concrete(path), headers={"X-Forwarded-For": "10.8.0.1"})
        assert resp.status == 401, (method, path, await resp.text())
        assert await resp.json() == {"error": "unauthorized"}


async def test_every_keyed_api_route_refuses_a_missing_key_and_a_key_without_read(proxied, make_key):
    writer = await make_key("write,admin")
    for (method, path), access in API.items():
        if access != "bearer":
            continue
        resp = await proxied.request(method, _concrete(path), headers={"X-Forwarded-For": "10.7.0.1"})
        assert (resp.status, await resp.json()) == (401, {"error": "missing Authorization: Bearer <API key>"}), path
        assert "X-RateLimit-Limit" in resp.headers
        resp = await proxied.request(method, _concrete(path), headers={**bearer(writer), "X-Forwarded-For": "10.7.0.2"})
        assert (resp.status, await resp.json()) == (403, {"error": "this key lacks the 'read' scope"}), path


async def test_unknown_paths_answer_in_the_shape_of_the_api_they_fall_in(client, make_key):
    # docs/decisions.md "Error codes": an unknown /v1 path is 401 without a key, 404 with one.
    anonymous = await client.get("/v1/nope")
    assert anonymous.status == 401 and (await anonymous.json())["error"]["code"] == "unauthorized"
    keyed = await client.get("/v1/nope", headers=bearer(await make_key("read")))
    assert keyed.status == 404 and (await keyed.json())["error"]["code"] == "not_found"
    assert "X-RateLimit-Limit" in keyed.headers
    site = await client.get("/api/nope")
    assert site.status == 404 and await site.json() == {"error": "no route for get /api/nope"}
    top = await client.get("/nope")
    assert top.status == 404 and (await top.json())["error"]["code"] == "not_found"


async def test_ingestion_is_marked_and_reads_no_session(client):
    resp = await client.post("/api/service/event", json={"s": "routing-test", "n": "pageview"},
                             headers={"Cookie": "tally_session=forged", "Origin": "https://elsewhere.example"})
    assert resp.status == 202  # no same-origin refusal, no session lookup of the forged cookie
    assert "Set-Cookie" not in resp.headers
