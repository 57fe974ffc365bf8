"""Dashboard sessions end on the server: a new id at sign-in (no fixation), and signing out stops a
copied cookie, with and without Redis."""

from __future__ import annotations

import dataclasses
import secrets

import asyncpg
import pytest

from app.dashboard_session import COOKIE
from storage import accounts
from tests.conftest import password_hash


@pytest.fixture(params=["postgres", "redis"])
async def mode_client(request, make_client, settings, redis_url):
    if request.param == "redis":
        settings = dataclasses.replace(settings, redis_url=redis_url)
    return await make_client(settings)


async def _account(database_url: str, password: str = "correct horse battery") -> str:
    email = f"{secrets.token_hex(4)}@example.com"
    conn = await asyncpg.connect(database_url)
    try:
        await accounts.upsert_account(conn, email, password_hash(password), f"ws-{secrets.token_hex(6)}")
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


@pytest.mark.parametrize("mode", ["postgres", "redis"])
async def test_a_password_reset_ends_the_accounts_sessions(make_client, settings, database_url, tmp_path, mode):
    """`tally create-user` on an existing email resets its password (README); the account's sessions went
    on for their 30 days, so a reset after a leak left the intruder signed in (security walk-through)."""
    from tests.test_dependency_outages import OwnRedis

    own = OwnRedis()  # the reset scans every session key: not the machine's shared Redis, which other runs use
    if mode == "redis":
        own.start()
    redis_url = own.url if mode == "redis" else ""
    try:
        await _reset_ends_sessions(make_client, settings, database_url, tmp_path, redis_url)
    finally:
        own.kill()


async def _reset_ends_sessions(make_client, settings, database_url, tmp_path, redis_url: str) -> None:
    import asyncio
    import os
    import subprocess
    import sys

    client = await make_client(dataclasses.replace(settings, redis_url=redis_url or None))
    email, other = await _account(database_url), await _account(database_url)
    signed_in = []
    for who in (email, email, other):  # three browsers: a sign-in ends the session its browser carried
        client.session.cookie_jar.clear()
        signed_in.append(await _sign_in(client, who))
    *cookies, kept = signed_in
    assert all([(await _me(client, c)).status == 200 for c in signed_in])
    env = {**os.environ, "DATABASE_URL": database_url, "TALLY_DATA_DIR": str(tmp_path),
           "REDIS_URL": redis_url}
    args = [sys.executable, "-m", "app", "create-user", "--workspace", f"ws-{secrets.token_hex(4)}", "--email", email,
            "--password", "a new long password"]
    done = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "2 signed-in sessions ended" in done.stdout
    for cookie in cookies:
        assert (await _me(client, cookie)).status == 401
    assert (await _me(client, kept)).status == 200
