"""Dashboard sign-in: login, me, logout, and the throttles on guessing and spraying."""

from __future__ import annotations

import time
from types import SimpleNamespace

import aiohttp


async def test_login_me_logout(client, login):
    assert (await client.get("/api/auth/me")).status == 401
    email = await login()
    me = await (await client.get("/api/auth/me")).json()
    assert me["email"] == email and len(me["workspaces"]) == 1
    assert (await client.post("/api/auth/logout")).status == 200
    resp = await client.get("/api/auth/me")
    assert resp.status == 401
    assert await resp.json() == {"error": "unauthorized"}


async def test_login_and_me_answer_one_shape(client, login, workspace):
    email = await login()
    await client.post("/api/auth/logout")
    signed_in = await (await client.post("/api/auth/login",
                                         json={"email": email, "password": "correct horse battery"})).json()
    me = await (await client.get("/api/auth/me")).json()
    assert signed_in == me
    assert me["email"] == email
    assert me["workspace"]["name"] == workspace and set(me["workspace"]) == {"id", "name", "plan"}
    assert me["workspaces"] == [me["workspace"]]


async def test_wrong_password_is_generic_401(client, login):
    email = await login()
    await client.post("/api/auth/logout")
    resp = await client.post("/api/auth/login", json={"email": email, "password": "wrong"})
    assert resp.status == 401
    assert await resp.json() == {"error": "invalid email or password"}
    resp = await client.post("/api/auth/login", json={"email": "nobody@example.com", "password": "wrong"})
    assert (await resp.json()) == {"error": "invalid email or password"}


async def test_login_sets_httponly_lax_cookie_and_takes_json_only(client, login):
    email = await login(password="form password 1")
    await client.post("/api/auth/logout")
    # A cross-site HTML form can send form encoding without asking: login takes JSON only.
    resp = await client.post("/api/auth/login", data={"email": email, "password": "form password 1"})
    assert resp.status == 415
    assert await resp.json() == {"error": "content-type must be application/json"}
    assert "Set-Cookie" not in resp.headers
    resp = await client.post("/api/auth/login", json={"email": email, "password": "form password 1"})
    assert resp.status == 200
    cookie = resp.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie


async def test_repeated_failures_are_rate_limited(client, login):
    email = await login()
    statuses = []
    for _ in range(22):  # beyond 20 a minute, however slowly the hashing runs
        resp = await client.post("/api/auth/login", json={"email": email, "password": "nope"})
        statuses.append(resp.status)
        if resp.status == 429:
            break
    # The fixture's own sign-in counted too, so the limit bites on the 5th failure at the earliest.
    assert len(statuses) >= 5 and set(statuses[:-1]) == {401}
    assert statuses[-1] == 429
    assert "Retry-After" in resp.headers


async def test_login_with_nul_characters_is_a_400(client):
    resp = await client.post("/api/auth/login", json={"email": "a\x00@b.c", "password": "x"})
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid payload"


async def test_unknown_email_is_checked_against_a_dummy_hash(client, login, monkeypatch):
    """Without a hash check an unknown email answered in ~2 ms and a wrong password in ~190 ms."""
    from app import dashboard_session as ds

    checked = []
    real = ds.check_password

    def spy(stored_hash: str, password: str) -> bool:
        checked.append(stored_hash)
        return real(stored_hash, password)

    monkeypatch.setattr(ds, "check_password", spy)
    resp = await client.post("/api/auth/login", json={"email": "nobody@example.com", "password": "guess"})
    assert resp.status == 401
    assert await resp.json() == {"error": "invalid email or password"}
    assert len(checked) == 1 and checked[0].startswith("$argon2id$")
    # The same parameters as a real account's hash, so the check costs the same.
    email = await login()
    await client.post("/api/auth/logout")
    await client.post("/api/auth/login", json={"email": email, "password": "wrong"})
    assert checked[1].split("$")[:4] == checked[0].split("$")[:4]


async def test_spraying_many_emails_from_one_address_is_limited(client, monkeypatch):
    # The limiter's clock moves 0.2 s per attempt from the start of a minute: under the per-second limit,
    # and never across a minute boundary, where the sliding window would rightly let a few more through.
    start = (time.time() // 60 + 1) * 60 + 1
    ticks = iter(start + 0.2 * i for i in range(1000))
    monkeypatch.setattr("app.ratelimit.time", SimpleNamespace(time=lambda: next(ticks)))
    statuses = []
    for i in range(40):
        resp = await client.post("/api/auth/login", json={"email": f"user{i}@example.com", "password": "Summer2026"})
        statuses.append(resp.status)
        if resp.status == 429:
            assert "Retry-After" in resp.headers
            assert await resp.json() == {"error": "too many login attempts"}
            break
    assert statuses[-1] == 429 and set(statuses[:-1]) == {401}
    assert len(statuses) == 31  # 30 attempts a minute per address


async def test_a_body_that_does_not_decode_by_its_content_encoding_is_a_400(client, login):
    await login()
    for path, headers in (("/api/auth/login", {"Content-Type": "application/json"}),
                          ("/api/sites", {"Content-Type": "application/x-www-form-urlencoded"})):
        resp = await client.post(path, data=b"domain=shop.example", headers={**headers, "Content-Encoding": "gzip"})
        assert resp.status == 400, path
        assert await resp.json() == {"error": "invalid request body"}
    assert await (await client.get("/api/sites")).json() == []


async def test_a_sign_in_holds_no_database_connection_while_it_hashes(make_client, settings, login, make_key,
                                                                        monkeypatch):
    """argon2 runs in one of a few worker threads, and sign-ins from many addresses queue for them: each held a
    pool connection meanwhile, so a wave of them took every connection from every other request. With a pool of
    one, a keyed read is served while a sign-in is still checking its password."""
    import asyncio
    import dataclasses
    import threading

    from app import dashboard_session as ds
    from tests.conftest import bearer

    key = bearer(await make_key("read"))
    client = await make_client(dataclasses.replace(settings, pool_max=1, db_request_timeout_seconds=1.0,
                                                   key_cache_seconds=0))
    email = await login(the_client=client)
    await client.post("/api/auth/logout")
    hashing, done = threading.Event(), threading.Event()
    real = ds.check_password

    def held(stored_hash: str, password: str) -> bool:
        hashing.set()
        done.wait(30)
        return real(stored_hash, password)

    monkeypatch.setattr(ds, "check_password", held)
    signing_in = asyncio.create_task(client.post("/api/auth/login",
                                                 json={"email": email, "password": "correct horse battery"}))
    try:
        assert await asyncio.to_thread(hashing.wait, 30)
        read = await client.get("/v1/events?limit=1", headers=key)
        assert read.status == 200, await read.text()
    finally:
        done.set()
    assert (await signing_in).status == 200


async def test_a_form_body_that_does_not_parse_is_a_400(client, login):
    """aiohttp's form parsers raised on these bodies (a 500 each): a form's type and bytes are the client's to
    get wrong."""
    await login()
    site = await (await client.post("/api/sites", json={"domain": "forms.example"})).json()
    part = b'--xyz\r\nContent-Disposition: form-data; name="domain"\r\n\r\n\xff\r\n--xyz--\r\n'
    for path in ("/api/sites", f"/api/sites/{site['id']}/goals"):
        for content_type, body in (("multipart/form-data", b"domain=shop.example"),
                                   ("multipart/form-data; boundary=", b"domain=shop.example"),
                                   ("multipart/form-data; boundary=xyz", b"domain=shop.example"),
                                   ("multipart/form-data; boundary=xyz", part),
                                   ("application/x-www-form-urlencoded", b"domain=\xff\xfe"),
                                   ("application/x-www-form-urlencoded; charset=nonesuch", b"domain=a.example")):
            resp = await client.post(path, data=body, headers={"Content-Type": content_type})
            assert resp.status == 400, (path, content_type)
            assert await resp.json() == {"error": "invalid request body"}
    assert [s["domain"] for s in await (await client.get("/api/sites")).json()] == ["forms.example"]
    assert (await (await client.get(f"/api/sites/{site['id']}/goals")).json())["goals"] == []
    # A well-formed multipart form is read as before.
    form = aiohttp.FormData({"domain": "shop.example"}, default_to_multipart=True)
    resp = await client.post("/api/sites", data=form)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["domain"] == "shop.example"
