"""POST /api/event: Plausible's Events API payload, mapped to the site registered for its domain and
ingested down the same path as /api/service/event (checks, bots, limits, sessions, origin rules)."""

from __future__ import annotations

import dataclasses
import secrets

import orjson
import pytest

from app.views.sites import site_id_for
from tests.site_helpers import BROWSER_UA, ms, register_site, stored_events, visits
from tests.test_site_dimensions import UA

PLAUSIBLE = "/api/event"


async def send(client, body, headers: dict | None = None, *, content_type: str = "text/plain"):
    data = body if isinstance(body, bytes | str) else orjson.dumps(body)
    return await client.post(PLAUSIBLE, data=data, headers={
        "Content-Type": content_type, "User-Agent": BROWSER_UA, **(headers or {})})


async def test_tracker_payload_is_stored_for_the_domains_site(client, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    # What the plausible-tracker npm package sends: short names, props as a JSON string, text/plain.
    body = {"n": "pageview", "u": f"https://{domain}/pricing?utm_source=newsletter&utm_medium=email#top",
            "d": domain, "r": "https://www.google.com/", "w": 1280, "h": 0}
    resp = await send(client, body, {"User-Agent": UA["safari_mac"], "CF-IPCountry": "FR"})
    assert resp.status == 202
    assert await resp.text() == "ok"
    assert "Set-Cookie" not in resp.headers
    [row] = await stored_events(database_url, site)
    assert {k: row[k] for k in ("name", "url", "path", "referrer", "title", "viewport_w", "properties",
                                "country")} == {
        "name": "pageview", "url": body["u"], "path": "/pricing?utm_source=newsletter&utm_medium=email",
        "referrer": "https://www.google.com/", "title": None, "viewport_w": 1280, "properties": None,
        "country": "FR"}
    assert {k: row[k] for k in ("browser", "browser_version", "os", "os_version", "device", "utm_source",
                                "utm_medium", "source", "channel")} == {
        "browser": "Safari", "browser_version": "17", "os": "macOS", "os_version": "10.15", "device": "Laptop",
        "utm_source": "newsletter", "utm_medium": "email", "source": "newsletter", "channel": "Email"}


async def test_long_field_names_json_props_and_revenue(client, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    body = {"name": "Purchase", "url": f"https://{domain}/checkout", "domain": domain,
            "referrer": None, "props": {"plan": "pro", "seats": 3}, "interactive": True,
            "revenue": {"currency": "eur", "amount": "13.29"}}
    resp = await send(client, body, content_type="application/json")
    assert resp.status == 202 and await resp.text() == "ok"
    [row] = await stored_events(database_url, site)
    assert (row["name"], row["path"], row["referrer"]) == ("Purchase", "/checkout", None)
    assert row["properties"] == {"plan": "pro", "seats": 3, "$revenue_amount": "13.29", "$revenue_currency": "EUR"}


@pytest.mark.parametrize("field", ["m", "meta"])
async def test_the_older_meta_field_carries_props_too(client, database_url, workspace, field):
    """Plausible's tracker sent custom props as `m` (`meta`, a JSON string) before `p`, and its legacy
    script still does for plausible('Signup', {meta: {...}}); Plausible reads m, meta, p and props. They
    were dropped without a word, so a page moved from such a script lost every custom property."""
    site, domain = await register_site(database_url, workspace)
    body = {"n": "Signup", "u": f"https://{domain}/join", "d": domain, field: orjson.dumps({"plan": "pro"}).decode()}
    assert (await send(client, body)).status == 202
    body = {"n": "Both", "u": f"https://{domain}/join", "d": domain, field: {"plan": "pro", "seats": 1},
            "p": {"seats": 3}}
    assert (await send(client, body)).status == 202
    rows = await stored_events(database_url, site)
    assert {r["name"]: r["properties"] for r in rows} == {"Signup": {"plan": "pro"},
                                                          "Both": {"plan": "pro", "seats": 3}}
    resp = await send(client, {"n": "Bad", "u": f"https://{domain}/", "d": domain, field: "[1]"})
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload", "issues": [
        {"field": field, "message": "must be an object or a JSON-encoded object"}]}


async def test_outbound_clicks_become_tallys_outbound_event(client, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    resp = await send(client, {"n": "Outbound Link: Click", "u": f"https://{domain}/", "d": domain,
                               "p": '{"url":"https://partner.example/"}'})
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert (row["name"], row["properties"]) == ("outbound", {"url": "https://partner.example/"})


@pytest.mark.parametrize(("hash_mode", "path"), [(1, "/app#/settings"), (0, "/app"), (None, "/app")])
async def test_hash_mode_keeps_the_fragment_in_the_path(client, database_url, workspace, hash_mode, path):
    site, domain = await register_site(database_url, workspace)
    await send(client, {"n": "pageview", "u": f"https://{domain}/app#/settings", "d": domain, "h": hash_mode})
    [row] = await stored_events(database_url, site)
    assert row["path"] == path


@pytest.mark.parametrize("sent", ["www.{d}", "WWW.{D}", "{d},rollup.example", "https://{d}/"])
async def test_domain_is_normalized_and_a_rollup_list_records_its_first(client, database_url, workspace, sent):
    site, domain = await register_site(database_url, workspace)
    resp = await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": sent.format(d=domain,
                                                                                         D=domain.upper())})
    assert resp.status == 202
    assert len(await stored_events(database_url, site)) == 1


async def test_development_registers_an_unknown_domain(client, database_url):
    from tests.conftest import connect

    domain = f"new-{secrets.token_hex(4)}.example"
    assert (await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain})).status == 202
    conn = await connect(database_url)
    try:
        row = await conn.fetchrow("SELECT s.id, s.domain, w.name FROM sites s JOIN workspaces w "
                                  "ON w.id = s.workspace_id WHERE s.domain = $1", domain)
    finally:
        await conn.close()
    assert dict(row) == {"id": site_id_for(domain), "domain": domain, "name": "default"}
    assert len(await stored_events(database_url, site_id_for(domain))) == 1


async def test_a_site_whose_id_is_not_derived_from_its_domain_is_found_by_domain(client, database_url, workspace):
    from tests.analytics_support import create_site
    from tests.conftest import connect

    conn = await connect(database_url)
    try:
        site, domain, _ = await create_site(conn, workspace)
    finally:
        await conn.close()
    assert site != site_id_for(domain)
    assert (await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain})).status == 202
    assert len(await stored_events(database_url, site)) == 1


async def test_events_of_one_visitor_share_a_session(client, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    for name, path in (("pageview", "/"), ("pageview", "/pricing"), ("Signup", "/pricing")):
        assert (await send(client, {"n": name, "u": f"https://{domain}{path}", "d": domain})).status == 202
    rows = await stored_events(database_url, site)
    assert len({r["session_id"] for r in rows}) == 1
    visit = (1, 2, 3, ms(rows[-1]["ts"] - rows[0]["ts"]))
    assert await visits(client.app, site, rows, "entry_page") == {"/": visit}
    assert await visits(client.app, site, rows, "exit_page") == {"/pricing": visit}


@pytest.mark.parametrize(("body", "issues"), [
    ({}, [{"field": "name", "message": "required"}, {"field": "url", "message": "required"},
          {"field": "domain", "message": "required"}]),
    ({"n": "pageview", "u": "https://a.example/", "d": "localhost"}, [{"field": "d", "message": "not a domain name"}]),
    ({"n": "pageview", "url": "/relative", "d": "a.example"}, [{"field": "url", "message": "must be an absolute URL"}]),
    ({"n": "pageview", "u": "http://[::1", "d": "a.example"}, [{"field": "u", "message": "must be an absolute URL"}]),
    ({"n": "x" * 65, "u": "https://a.example/", "d": "a.example"},
     [{"field": "n", "message": "Expected `str` of length <= 64"}]),
    ({"n": 5, "u": "https://a.example/", "d": "a.example"}, [{"field": "n", "message": "Expected `str`"}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "p": "[1]"},
     [{"field": "p", "message": "must be an object or a JSON-encoded object"}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "p": "{not json"},
     [{"field": "p", "message": "must be an object or a JSON-encoded object"}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "revenue": {"currency": "EURO", "amount": 1}},
     [{"field": "revenue", "message": 'must be {"currency": "<ISO 4217 code>", "amount": <number>}'}]),
    ({"n": "   ", "u": "https://a.example/", "d": "a.example"}, [{"field": "n", "message": "must not be blank"}]),
    ({"name": "\t", "u": "https://a.example/", "d": "a.example"}, [{"field": "name", "message": "must not be blank"}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "revenue": {"currency": "USD\n", "amount": 1}},
     [{"field": "revenue", "message": 'must be {"currency": "<ISO 4217 code>", "amount": <number>}'}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "$": {"currency": "USD", "amount": "NaN"}},
     [{"field": "$", "message": 'must be {"currency": "<ISO 4217 code>", "amount": <number>}'}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "interactive": "yes"},
     [{"field": "interactive", "message": "Expected `bool`"}]),
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "w": "wide"},
     [{"field": "w", "message": "Expected `number`"}]),
    ({"n": "e\u0000", "u": "https://a.example/", "d": "a.example"},
     [{"field": "n", "message": "must not contain NUL characters"}]),
    ({"name": "e", "u": "https://a.example/", "d": "a.example", "props": {"k": "\u0000"}},
     [{"field": "props", "message": "must not contain NUL characters"}]),
    # JSON text deeper than the decoder goes, inside the string the npm tracker sends
    ({"n": "e", "u": "https://a.example/", "d": "a.example", "p": "[" * 10_000 + "]" * 10_000},
     [{"field": "p", "message": "must be an object or a JSON-encoded object"}]),
])
async def test_invalid_payloads_are_400_in_the_site_shape(client, body, issues):
    resp = await send(client, body, content_type="application/json")
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload", "issues": issues}


@pytest.mark.parametrize(("raw", "answer"), [
    (b"{not json", {"error": "invalid json"}),
    (b"", {"error": "invalid json"}),
    (b"[1,2]", {"error": "invalid payload", "issues": [{"field": "", "message": "expected a JSON object"}]}),
])
async def test_bodies_that_are_not_a_json_object(client, raw, answer):
    resp = await send(client, raw)
    assert resp.status == 400
    assert await resp.json() == answer


async def test_bots_are_dropped_with_202_like_the_tally_endpoint(client, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    resp = await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain},
                      {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
                       "Origin": f"https://{domain}"})
    assert resp.status == 202
    assert await stored_events(database_url, site) == []


async def test_per_ip_rate_limit_applies(make_client, settings, database_url, workspace):
    client = await make_client(dataclasses.replace(settings, ip_events_per_min=2))
    site, domain = await register_site(database_url, workspace)
    statuses = [(await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain})).status
                for _ in range(4)]
    assert statuses == [202] * 4
    assert len(await stored_events(database_url, site)) == 2


@pytest.fixture
async def prod(make_client, settings):
    return await make_client(dataclasses.replace(settings, env="production"))


async def test_production_unknown_domain_is_404(prod):
    resp = await send(prod, {"n": "pageview", "u": "https://nobody.example/", "d": "nobody-here.example"})
    assert resp.status == 404
    assert await resp.json() == {"error": "unknown site"}


async def test_production_unverified_domain_is_403(prod, database_url, workspace):
    site, domain = await register_site(database_url, workspace, verified=False)
    resp = await send(prod, {"n": "pageview", "u": f"https://{domain}/", "d": domain}, {"Origin": f"https://{domain}"})
    assert resp.status == 403
    assert await resp.json() == {"error": "site not verified"}
    assert await stored_events(database_url, site) == []


async def test_production_origin_rules(prod, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    ok = await send(prod, {"n": "pageview", "u": f"https://{domain}/", "d": domain},
                    {"Origin": f"https://www.{domain}"})
    assert ok.status == 202
    assert ok.headers["Access-Control-Allow-Origin"] == f"https://www.{domain}"
    bad = await send(prod, {"n": "pageview", "u": f"https://{domain}/", "d": domain},
                     {"Origin": "https://evil.example"})
    assert bad.status == 403 and await bad.json() == {"error": "origin not allowed"}
    assert "Access-Control-Allow-Origin" not in bad.headers
    assert len(await stored_events(database_url, site)) == 1


async def test_production_preflight(prod, database_url, workspace):
    _, domain = await register_site(database_url, workspace)
    resp = await prod.options(PLAUSIBLE, headers={"Origin": f"https://{domain}",
                                                  "Access-Control-Request-Method": "POST"})
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == f"https://{domain}"
    refused = await prod.options(PLAUSIBLE, headers={"Origin": "https://unknown-origin.example",
                                                     "Access-Control-Request-Method": "POST"})
    assert refused.status == 403


async def test_store_failure_is_500_and_oversized_bodies_413(client, database_url, workspace, monkeypatch):
    import asyncpg

    from storage import events as event_store

    site, domain = await register_site(database_url, workspace)
    too_big = await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain, "p": {"x": "y" * 40_000}})
    assert too_big.status == 413
    assert (await too_big.json())["error"] == "payload too large"

    async def broken(conn, records):
        raise asyncpg.PostgresError("disk full")

    monkeypatch.setattr(event_store, "copy_events", broken)
    resp = await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain})
    assert resp.status == 500
    assert await resp.json() == {"error": "store failed"}
    assert await stored_events(database_url, site) == []


async def test_development_mirrors_the_origin(client, database_url, workspace):
    _, domain = await register_site(database_url, workspace)
    origin = "http://localhost:3000"
    resp = await send(client, {"n": "pageview", "u": f"https://{domain}/", "d": domain}, {"Origin": origin})
    assert resp.status == 202
    assert resp.headers["Access-Control-Allow-Origin"] == origin


async def test_hash_routes_are_pages_of_their_own(client, database_url, workspace, login):
    """In hash mode each `#/route` is a page, as in Plausible's dashboard, in every page list and in
    realtime; an anchor (`#top`) and a query string inside the route still count under their page."""
    await login()
    site, domain = await register_site(database_url, workspace)
    for url in ("/app/", "/app/#/settings", "/app/#/settings?tab=2", "/app/#!/billing", "/app/#top", "/app/#/"):
        assert (await send(client, {"n": "pageview", "u": f"https://{domain}{url}", "d": domain, "h": 1})).status == 202
    q = {"siteId": site, "range": "24h"}
    top = await (await client.get("/api/analytics/top-pages", params=q)).json()
    assert [(r["key"], r["count"]) for r in top["data"]] == [("/app/", 3), ("/app/#/settings", 2),
                                                             ("/app/#!/billing", 1)]
    for prop, keys in (("page", ["/app/", "/app/#!/billing", "/app/#/settings"]), ("entry_page", ["/app/"]),
                       ("exit_page", ["/app/"])):
        body = await (await client.get("/api/analytics/breakdown", params={**q, "property": prop})).json()
        assert [r["key"] for r in body["data"]] == keys, prop
    body = await (await client.get("/api/analytics/overview",
                                   params={**q, "filter": "page==/app/#/settings"})).json()
    assert body["totalPageviews"] == 2
    live = await (await client.get("/api/analytics/realtime", params={"siteId": site})).json()
    assert live["topActivePages"] == [{"key": "/app/", "count": 3}, {"key": "/app/#/settings", "count": 2},
                                      {"key": "/app/#!/billing", "count": 1}]
