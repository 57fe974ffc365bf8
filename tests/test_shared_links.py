"""Shared links of a site: created, listed and revoked under the session; their token reads that one site's
overview without a session and nothing else (no other site, workspace, event log, export or write)."""

from __future__ import annotations

import asyncio
import re

import pytest

from app.views.shared_links import MAX_LINKS
from tests.conftest import connect
from tests.site_helpers import post_event, register_site

URL = re.compile(r"^http://127\.0\.0\.1:\d+/share/([A-Za-z0-9_-]{32})$")
OVERVIEW_READS = ("overview", "timeseries", "top-pages", "top-referrers", "top-countries")


def links_path(site: str, link: str | None = None) -> str:
    return f"/api/sites/{site}/shared-links" + (f"/{link}" if link else "")


async def stored_links(database_url: str, site: str) -> list[tuple]:
    conn = await connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, name FROM site_shared_links WHERE site_id = $1 ORDER BY created_at, id",
                                site)
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


def token_of(link: dict) -> str:
    match = URL.match(link["url"])
    assert match, link["url"]
    return match.group(1)


@pytest.fixture
async def site(client, login, database_url, workspace) -> str:
    """A signed-in client's site with four events: three pageviews (two visits) and a signup."""
    await login()
    site_id, _ = await register_site(database_url, workspace)
    for body in ({"p": "/", "sid": "v1"}, {"p": "/pricing", "sid": "v1"}, {"p": "/", "sid": "v2"}):
        assert (await post_event(client, {"s": site_id, "n": "pageview", **body})).status == 202
    assert (await post_event(client, {"s": site_id, "n": "signup", "p": "/pricing", "sid": "v1"})).status == 202
    return site_id


async def share(client, site: str, **body) -> dict:
    resp = await client.post(links_path(site), json=body or None)
    assert resp.status == 201, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    return await resp.json()


async def test_create_list_and_revoke(client, site, database_url):
    first = await share(client, site)
    second = await share(client, site, name="  Investors  ")
    assert (first["name"], second["name"]) == ("Shared link", "Investors")
    assert token_of(first) != token_of(second) and first["id"].startswith("shl_")
    listed = await client.get(links_path(site))
    assert listed.status == 200 and await listed.json() == {"links": [first, second]}
    assert await stored_links(database_url, site) == [(first["id"], "Shared link"), (second["id"], "Investors")]

    resp = await client.delete(links_path(site, first["id"]))
    assert resp.status == 200 and await resp.json() == {"deleted": True}
    assert await (await client.get(links_path(site))).json() == {"links": [second]}
    again = await client.delete(links_path(site, first["id"]))
    assert again.status == 404 and await again.json() == {"error": "not found"}


async def test_bad_input_changes_nothing(client, site, database_url):
    for body, issue in (({"name": "x" * 65}, "name"), ({"name": 5}, "name"), ({"nmae": "a"}, "nmae")):
        resp = await client.post(links_path(site), json=body)
        assert resp.status == 400, body
        assert [i["field"] for i in (await resp.json())["issues"]] == [issue]
    resp = await client.post(links_path(site), data=b"{", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and await resp.json() == {"error": "invalid json"}
    resp = await client.post(links_path(site), data=b'{"name": "' + b"x" * 5000 + b'"}')
    assert resp.status == 413 and (await resp.json())["error"] == "payload too large"

    async def chunked():  # a body that arrives in pieces is read whole
        for piece in (b'{"na', b'me": "in', b' pieces"}'):
            yield piece
            await asyncio.sleep(0.05)  # lets the server see each piece on its own

    resp = await client.post(links_path(site), data=chunked(), headers={"Content-Type": "application/json"})
    assert resp.status == 201 and (await resp.json())["name"] == "in pieces"
    await client.delete(links_path(site, (await resp.json())["id"]))
    resp = await client.post(links_path(site), json={}, headers={"Origin": "https://evil.example"})
    assert resp.status == 403 and await resp.json() == {"error": "cross-origin request refused"}
    assert await stored_links(database_url, site) == []


async def test_links_per_site_are_capped(client, site, database_url):
    for _ in range(MAX_LINKS):
        await share(client, site)
    resp = await client.post(links_path(site))
    assert resp.status == 409 and (await resp.json())["error"] == "too many shared links"
    assert len(await stored_links(database_url, site)) == MAX_LINKS


async def test_another_workspaces_site_is_404(client, site, database_url, workspace):
    foreign, _ = await register_site(database_url, f"other-{workspace}")
    for method, path in (("GET", links_path(foreign)), ("POST", links_path(foreign)),
                         ("DELETE", links_path(foreign, "shl_x")), ("GET", links_path("no-such-site"))):
        resp = await client.request(method, path)
        assert resp.status == 404 and await resp.json() == {"error": "not found"}, (method, path)
    # Nor can a link of this site be revoked through another site's path.
    link = await share(client, site)
    other, _ = await register_site(database_url, workspace)
    assert (await client.delete(links_path(other, link["id"]))).status == 404
    assert await stored_links(database_url, site) == [(link["id"], "Shared link")]


async def test_the_token_reads_the_overview_without_a_session(client, site):
    signed_in = {}
    for read in (*OVERVIEW_READS, "realtime"):
        resp = await client.get(f"/api/analytics/{read}?siteId={site}")
        assert resp.status == 200
        signed_in[read] = await resp.json()
    token = token_of(await share(client, site))
    client.session.cookie_jar.clear()
    assert (await client.get(f"/api/analytics/overview?siteId={site}")).status == 401

    for read in (*OVERVIEW_READS, "realtime"):
        resp = await client.get(f"/api/analytics/{read}?siteId={site}&auth={token}")
        assert resp.status == 200, (read, await resp.text())
        body = await resp.json()
        if read == "realtime":  # single events are the event log's: a shared link sees the counts only
            assert body.pop("recentEvents") == [] and len(signed_in[read].pop("recentEvents")) == 4
        assert body == signed_in[read], read
    overview = signed_in["overview"]
    assert (overview["totalPageviews"], overview["totalEvents"]) == (3, 4)
    assert signed_in["realtime"]["pageviewsPerMinute"] == 3
    resp = await client.get(f"/api/analytics/breakdown?siteId={site}&property=page&auth={token}")
    assert resp.status == 200
    assert {r["key"] for r in (await resp.json())["data"]} == {"/", "/pricing"}
    resp = await client.get(f"/api/analytics/breakdown?siteId={site}&property=goal&metrics=visitors,events,"
                            f"conversion_rate&auth={token}")
    assert resp.status == 200
    resp = await client.get(f"/api/analytics/property-keys?siteId={site}&auth={token}")
    assert resp.status == 200


async def test_the_token_reads_nothing_else(client, site, database_url, workspace, login):
    token = token_of(await share(client, site))
    same_workspace, _ = await register_site(database_url, workspace)
    foreign, _ = await register_site(database_url, f"other-{workspace}")
    await post_event(client, {"s": foreign, "n": "pageview", "p": "/secret"})
    # Signed in to the other workspace: its session does not widen the token, nor the token the session.
    await login(workspace_name=f"other-{workspace}")
    for other in (same_workspace, foreign, "no-such-site"):
        for read in (*OVERVIEW_READS, "realtime", "breakdown?property=page&x=1"):
            path, _, extra = read.partition("?")
            resp = await client.get(f"/api/analytics/{path}?siteId={other}&auth={token}&{extra}")
            assert resp.status == 404 and await resp.json() == {"error": "not found"}, (other, read)
    client.session.cookie_jar.clear()

    # The event log, the export and anything but the overview's reads refuse the token outright.
    refused = [("GET", f"/api/analytics/events?siteId={site}"), ("GET", f"/api/analytics/export?siteId={site}"),
               ("GET", "/api/sites"), ("POST", "/api/sites"), ("GET", f"/api/verify?site={site}"),
               ("GET", links_path(site)), ("POST", links_path(site)), ("GET", f"/api/sites/{site}/goals"),
               ("POST", f"/api/sites/{site}/goals"), ("GET", "/api/keys"), ("POST", "/api/keys"),
               ("GET", "/api/auth/me")]
    for method, path in refused:
        joiner = "&" if "?" in path else "?"
        resp = await client.request(method, f"{path}{joiner}auth={token}", json={"goal_type": "event",
                                                                                "event_name": "x"})
        assert resp.status == 403, (method, path, await resp.text())
        assert await resp.json() == {"error": "a shared link cannot read this"}
    assert await stored_links(database_url, site) != []
    conn = await connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM goals WHERE site_id = $1", site) == 0
        assert await conn.fetchval("SELECT count(*) FROM site_shared_links WHERE site_id = $1", site) == 1
    finally:
        await conn.close()


async def test_a_revoked_or_unknown_token_is_404(client, site):
    link = await share(client, site)
    token = token_of(link)
    assert (await client.get(f"/share/{token}")).status == 200
    assert (await client.delete(links_path(site, link["id"]))).status == 200
    client.session.cookie_jar.clear()
    for bad in (token, "A" * 32, "short", "bad%20token%20with%20spaces", ""):
        resp = await client.get(f"/api/analytics/overview?siteId={site}&auth={bad}")
        assert resp.status == 404 and await resp.json() == {"error": "not found"}, bad
        resp = await client.get(f"/api/analytics/realtime?siteId={site}&auth={bad}")
        assert resp.status == 404, bad
    page = await client.get(f"/share/{token}")
    assert page.status == 404 and "no longer shared" in await page.text()


async def test_the_shared_page(client, site):
    link = await share(client, site)
    client.session.cookie_jar.clear()
    resp = await client.get(f"/share/{token_of(link)}")
    assert resp.status == 200 and resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "no-store" and resp.headers["Referrer-Policy"] == "no-referrer"
    assert "noindex" in resp.headers["X-Robots-Tag"] and "script-src 'self'" in resp.headers["Content-Security-Policy"]
    html = await resp.text()
    assert f'data-site-id="{site}"' in html and "/static/js/share.js" in html


async def test_a_link_with_a_password_shows_nothing_until_it_is_given(client, site, database_url):
    """As Plausible's password-protected links: the page is a password form and the token reads nothing until
    the password is given; then an access cookie (not the password, and per link) opens the page and its
    reads. The password is stored as an argon2 hash only."""
    link = await share(client, site, name="Board", password="correct horse 42")
    open_link = await share(client, site)
    other = await share(client, site, password="correct horse 42")
    assert (link["protected"], open_link["protected"]) == (True, False)
    listed = await (await client.get(links_path(site))).json()
    assert [x["protected"] for x in listed["links"]] == [True, False, True]
    conn = await connect(database_url)
    try:
        stored = await conn.fetchval("SELECT password_hash FROM site_shared_links WHERE id = $1", link["id"])
    finally:
        await conn.close()
    assert stored.startswith("$argon2") and "correct horse" not in stored
    for bad in ({"password": "short"}, {"password": 12345678}, {"password": "x" * 129}):
        resp = await client.post(links_path(site), json=bad)
        assert resp.status == 400 and (await resp.json())["issues"][0]["field"] == "password", bad

    token = token_of(link)
    client.session.cookie_jar.clear()
    page = await client.get(f"/share/{token}")
    assert page.status == 200 and "name=password" in await page.text() and "data-site-id" not in await page.text()
    assert "form-action 'self'" in page.headers["Content-Security-Policy"]
    read = await client.get(f"/api/analytics/overview?siteId={site}&auth={token}")
    assert read.status == 401 and (await read.json())["error"] == "this shared link needs its password"
    assert (await client.get(f"/api/analytics/overview?siteId={site}&auth={token_of(open_link)}")).status == 200

    wrong = await client.post(f"/share/{token}", data={"password": "wrong horse 42"}, allow_redirects=False)
    assert wrong.status == 401 and "Wrong password." in await wrong.text()
    assert not [c for c in client.session.cookie_jar if c.key.startswith("tally_share_")]
    right = await client.post(f"/share/{token}", data={"password": "correct horse 42"}, allow_redirects=False)
    assert right.status == 303 and right.headers["Location"] == f"/share/{token}"
    cookie = right.cookies[f"tally_share_{link['id']}"]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and "correct" not in cookie.value
    page = await client.get(f"/share/{token}")
    assert page.status == 200 and f'data-site-id="{site}"' in await page.text()
    read = await client.get(f"/api/analytics/overview?siteId={site}&auth={token}")
    assert read.status == 200 and (await read.json())["totalEvents"] == 4
    # The cookie opens its own link only.
    assert (await client.get(f"/api/analytics/overview?siteId={site}&auth={token_of(other)}")).status == 401


async def test_password_attempts_are_limited(client, site):
    token = token_of(await share(client, site, password="correct horse 42"))
    client.session.cookie_jar.clear()
    # Twelve at once from one address: the per-address pace is 10 a second.
    answers = await asyncio.gather(*(client.post(f"/share/{token}", data={"password": "guess guess"},
                                                 allow_redirects=False) for _ in range(12)))
    assert sorted(a.status for a in answers) == [401] * 10 + [429] * 2


async def test_a_links_name_and_password_can_be_changed(client, site, database_url):
    """PATCH renames a link and sets, changes or removes its password. A new password ends the access the old
    one gave (the access cookie signs the password's hash); removing it opens the link to anyone holding it."""
    link = await share(client, site, name="Board", password="correct horse 42")
    token, path = token_of(link), links_path(site, link["id"])
    right = await client.post(f"/share/{token}", data={"password": "correct horse 42"}, allow_redirects=False)
    assert right.status == 303
    read = f"/api/analytics/overview?siteId={site}&auth={token}"
    assert (await client.get(read)).status == 200

    resp = await client.patch(path, json={"name": "  Investors ", "password": "battery staple 7"})
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store", await resp.text()
    changed = await resp.json()
    assert (changed["name"], changed["protected"], changed["url"]) == ("Investors", True, link["url"])
    assert (await client.get(read)).status == 401  # the old password's cookie opens nothing now
    assert (await client.post(f"/share/{token}", data={"password": "correct horse 42"},
                              allow_redirects=False)).status == 401
    assert (await client.post(f"/share/{token}", data={"password": "battery staple 7"},
                              allow_redirects=False)).status == 303
    assert (await client.get(read)).status == 200

    # A rename alone keeps the password; null removes it.
    assert (await (await client.patch(path, json={"name": "Board"})).json())["protected"] is True
    removed = await client.patch(path, json={"password": None})
    assert removed.status == 200 and (await removed.json())["protected"] is False
    client.session.cookie_jar.clear()
    assert (await client.get(read)).status == 200
    assert await stored_links(database_url, site) == [(link["id"], "Board")]


async def test_a_bad_link_change_changes_nothing(client, site, database_url, workspace):
    link = await share(client, site, name="Board", password="correct horse 42")
    path = links_path(site, link["id"])
    for bad, field in (({"password": "short"}, "password"), ({"name": 5}, "name"), ({"token": "x"}, "token")):
        resp = await client.patch(path, json=bad)
        assert resp.status == 400 and (await resp.json())["issues"][0]["field"] == field, bad
    assert (await client.patch(path, data=b"[1]", headers={"Content-Type": "application/json"})).status == 400
    assert (await client.patch(links_path(site, "shl_nope"), json={"name": "x"})).status == 404
    other, _ = await register_site(database_url, workspace)
    assert (await client.patch(links_path(other, link["id"]), json={"name": "x"})).status == 404
    listed = (await (await client.get(links_path(site))).json())["links"]
    assert [(x["name"], x["protected"]) for x in listed] == [("Board", True)]
    client.session.cookie_jar.clear()
    assert (await client.post(f"/share/{token_of(link)}", data={"password": "correct horse 42"},
                              allow_redirects=False)).status == 303
