"""Dashboard sessions end on the server: a new id at sign-in (no fixation), and signing out stops a
copied cookie, with and without Redis."""

from __future__ import annotations

import dataclasses
import secrets

import asyncpg
import pytest

from app.dashboard_session import COOKIE, hash_password
from storage import accounts


@pytest.fixture(params=["postgres", "redis"])
async def mode_client(request, make_client, settings, redis_url):
    if request.param == "redis":
        settings = dataclasses.replace(settings, redis_url=redis_url)
    return await make_client(settings)


async def _account(database_url: str, password: str = "correct horse battery") -> str:
    email = f"{secrets.token_hex(4)}@example.com"
    conn = await asyncpg.connect(database_url)
    try:
        await accounts.upsert_account(conn, email, hash_password(password), f"ws-{secrets.token_hex(6)}")
    finally:
        await conn.close()
    return email


async def _sign_in(client, email: str) -> str:
    resp = await client.post("/api/auth/login", json={"email": email, "password": "correct horse battery"})
    assert resp.status == 200, await resp.text()
    return resp.cookies[COOKIE].value


async def _me(client, cookie: str):
    """GET /api/auth/me carrying exactly this cookie value, as a copied or planted cookie would be."""
    client.session.cookie_jar.clear()
    return await client.get("/api/auth/me", headers={"Cookie": f"{COOKIE}={cookie}"})


async def test_signing_out_ends_the_session_on_the_server(mode_client, database_url):
    email = await _account(database_url)
    cookie = await _sign_in(mode_client, email)
    assert (await _me(mode_client, cookie)).status == 200
    resp = await mode_client.post("/api/auth/logout", headers={"Cookie": f"{COOKIE}={cookie}"})
    assert resp.status == 200
    copied = await _me(mode_client, cookie)
    assert copied.status == 401
    assert await copied.json() == {"error": "unauthorized"}


async def test_sign_in_issues_a_new_session_id(mode_client, database_url):
    attacker, victim = await _account(database_url), await _account(database_url)
    planted = await _sign_in(mode_client, attacker)
    # The victim signs in in a browser carrying the attacker's cookie.
    mode_client.session.cookie_jar.clear()
    resp = await mode_client.post("/api/auth/login", headers={"Cookie": f"{COOKIE}={planted}"},
                                  json={"email": victim, "password": "correct horse battery"})
    assert resp.status == 200
    fresh = resp.cookies[COOKIE].value
    assert fresh and fresh != planted
    assert (await (await _me(mode_client, fresh)).json())["email"] == victim
    # The planted id never becomes the victim's session (it is ended, not upgraded).
    assert (await _me(mode_client, planted)).status == 401


async def test_a_made_up_cookie_is_signed_out(mode_client):
    assert (await _me(mode_client, secrets.token_urlsafe(32))).status == 401
