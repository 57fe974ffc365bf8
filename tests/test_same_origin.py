"""State-changing /api routes refuse requests a foreign page sends with the visitor's cookie, in
development and production; scripts without Origin and the dashboard's own pages keep working."""

from __future__ import annotations

import dataclasses
import secrets

import asyncpg
import pytest

from app.dashboard_session import COOKIE
from storage import accounts
from tests.conftest import password_hash
from tests.site_helpers import post_event, unique_domain

FOREIGN = {"Origin": "https://evil.example"}
PASSWORD = "correct horse battery"


@pytest.fixture(params=["development", "production"])
async def any_env(request, make_client, settings):
    return await make_client(dataclasses.replace(settings, env=request.param))


async def _account(database_url: str, workspace: str) -> str:
    email = f"{secrets.token_hex(4)}@example.com"
    conn = await asyncpg.connect(database_url)
    try:
        await accounts.upsert_account(conn, email, password_hash(PASSWORD), workspace)
    finally:
        await conn.close()
    return email


def _own(client) -> dict[str, str]:
    return {"Origin": f"http://{client.host}:{client.port}"}


async def _cookie(client, email: str) -> dict[str, str]:
    """Sign in and return the session as an explicit header (production cookies are Secure-only)."""
    resp = await client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
    assert resp.status == 200
    client.session.cookie_jar.clear()
    return {"Cookie": f"{COOKIE}={resp.cookies[COOKIE].value}"}


async def _sites(database_url: str, workspace: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        return [r["domain"] for r in await conn.fetch(
            "SELECT s.domain FROM sites s JOIN workspaces w ON w.id = s.workspace_id WHERE w.name = $1", workspace)]
    finally:
        await conn.close()


async def test_cross_origin_form_login_is_refused(any_env, database_url, workspace):
    email = await _account(database_url, workspace)
    for headers in (FOREIGN, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
        resp = await any_env.post("/api/auth/login", data={"email": email, "password": PASSWORD}, headers=headers)
        assert resp.status == 403, headers
        assert await resp.json() == {"error": "cross-origin request refused"}
        assert COOKIE not in resp.cookies
        resp = await any_env.post("/api/auth/login", json={"email": email, "password": PASSWORD}, headers=headers)
        assert resp.status == 403, headers
    # The dashboard's own page, and a script sending no Origin, sign in.
    resp = await any_env.post("/api/auth/login", json={"email": email, "password": PASSWORD},
                              headers={**_own(any_env), "Sec-Fetch-Site": "same-origin"})
    assert resp.status == 200
    assert (await any_env.post("/api/auth/login", json={"email": email, "password": PASSWORD})).status == 200


async def test_cross_origin_form_site_creation_is_refused(any_env, database_url, workspace):
    cookie = await _cookie(any_env, await _account(database_url, workspace))
    for headers in (FOREIGN, {"Origin": f"http://{any_env.host}:1"}, {"Sec-Fetch-Site": "cross-site"}):
        resp = await any_env.post("/api/sites", data={"domain": unique_domain()}, headers={**cookie, **headers})
        assert resp.status == 403, headers
        assert await resp.json() == {"error": "cross-origin request refused"}
    assert await _sites(database_url, workspace) == []
    # The spec's form encoding still works from the dashboard itself and from curl.
    mine, scripted = unique_domain(), unique_domain()
    resp = await any_env.post("/api/sites", data={"domain": mine}, headers={**cookie, **_own(any_env)})
    assert resp.status == 200, await resp.text()
    resp = await any_env.post("/api/sites", data={"domain": scripted}, headers=cookie)
    assert resp.status == 200
    assert sorted(await _sites(database_url, workspace)) == sorted([mine, scripted])


async def test_other_state_changing_routes_are_refused_cross_origin(client, login):
    await login()
    for method, path in (("POST", "/api/keys"), ("DELETE", "/api/keys/key_x"), ("POST", "/api/verify?site=x"),
                         ("POST", "/api/auth/logout")):
        resp = await client.request(method, path, json={"name": "k", "scopes": ["read"]}, headers=FOREIGN)
        assert resp.status == 403, path
    assert (await client.get("/api/auth/me", headers=FOREIGN)).status == 200  # still signed in; reads pass
    assert (await client.get("/api/keys")).status == 200


async def test_ingestion_stays_open_to_any_page_in_development(client):
    resp = await post_event(client, {"s": f"dev-{secrets.token_hex(6)}", "n": "pageview"}, FOREIGN)
    assert resp.status == 202
    assert resp.headers["Access-Control-Allow-Origin"] == FOREIGN["Origin"]
