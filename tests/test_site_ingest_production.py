"""Production rules of POST /api/service/event: registered and verified sites, origin matching, CORS."""

from __future__ import annotations

import dataclasses

import pytest

from tests.site_helpers import INGEST, post_event, register_site, stored_events


@pytest.fixture
async def prod(make_client, settings):
    return await make_client(dataclasses.replace(settings, env="production"))


async def test_unknown_site_is_404(prod):
    resp = await post_event(prod, {"s": "no-such-site", "n": "pageview"})
    assert resp.status == 404
    assert await resp.json() == {"error": "unknown site"}


async def test_unverified_site_is_403_and_the_page_may_read_it(prod, database_url, workspace):
    site, domain = await register_site(database_url, workspace, verified=False)
    resp = await post_event(prod, {"s": site, "n": "pageview"}, {"Origin": f"https://{domain}"})
    assert resp.status == 403
    assert await resp.json() == {"error": "site not verified"}
    # The preflight admitted this page, so the browser must be let to show it the reason.
    assert resp.headers["Access-Control-Allow-Origin"] == f"https://{domain}"
    assert resp.headers["Vary"] == "Origin"
    assert await stored_events(database_url, site) == []


async def test_errors_before_the_site_is_known_are_readable_by_registered_pages_only(prod, database_url,
                                                                                     workspace):
    site, domain = await register_site(database_url, workspace)
    origin = f"https://www.{domain}"
    for body, error in (({"s": site}, "invalid payload"), ({"s": "no-such-site", "n": "pageview"}, "unknown site")):
        resp = await post_event(prod, body, {"Origin": origin})
        assert (await resp.json())["error"] == error
        assert resp.headers["Access-Control-Allow-Origin"] == origin
        foreign = await post_event(prod, body, {"Origin": "https://evil.example"})
        assert (await foreign.json())["error"] == error
        assert "Access-Control-Allow-Origin" not in foreign.headers
    assert await stored_events(database_url, site) == []


@pytest.mark.parametrize("origin", ["https://{d}", "http://{d}:8080", "https://www.{d}", "https://a.b.{d}"])
async def test_domain_and_subdomains_are_allowed_and_mirrored(prod, database_url, workspace, origin):
    site, domain = await register_site(database_url, workspace)
    origin = origin.format(d=domain)
    resp = await post_event(prod, {"s": site, "n": "pageview"}, {"Origin": origin})
    assert resp.status == 202
    assert resp.headers["Access-Control-Allow-Origin"] == origin
    assert resp.headers["Vary"] == "Origin"
    assert len(await stored_events(database_url, site)) == 1


@pytest.mark.parametrize("origin", ["https://evil.example", "https://not{d}", "https://{d}.evil.example", "null"])
async def test_other_origins_are_403(prod, database_url, workspace, origin):
    site, domain = await register_site(database_url, workspace)
    resp = await post_event(prod, {"s": site, "n": "pageview"}, {"Origin": origin.format(d=domain)})
    assert resp.status == 403
    assert await resp.json() == {"error": "origin not allowed"}
    assert "Access-Control-Allow-Origin" not in resp.headers
    assert await stored_events(database_url, site) == []


async def test_referer_is_used_without_origin(prod, database_url, workspace):
    site, domain = await register_site(database_url, workspace)
    ok = await post_event(prod, {"s": site, "n": "pageview"}, {"Referer": f"https://blog.{domain}/post?x=1"})
    assert ok.status == 202
    bad = await post_event(prod, {"s": site, "n": "pageview"}, {"Referer": "https://elsewhere.example/"})
    assert bad.status == 403 and await bad.json() == {"error": "origin not allowed"}
    assert len(await stored_events(database_url, site)) == 1


async def test_server_side_sender_without_origin_is_allowed(prod, database_url, workspace):
    site, _ = await register_site(database_url, workspace)
    resp = await prod.post(INGEST, json={"s": site, "n": "order", "sid": "visit-1"},
                           headers={"User-Agent": "python-requests/2.32"})
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert row["session_id"] == "visit-1"


async def test_preflight_for_registered_domain(prod, database_url, workspace):
    _, domain = await register_site(database_url, workspace)
    origin = f"https://shop.{domain}"
    resp = await prod.options(INGEST, headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == origin
    assert resp.headers["Access-Control-Max-Age"] == "86400"
    assert resp.headers["Vary"] == "Origin"
    refused = await prod.options(INGEST, headers={"Origin": "https://unknown-origin.example",
                                                  "Access-Control-Request-Method": "POST"})
    assert refused.status == 403
    assert await refused.json() == {"error": "origin not allowed"}
    assert "Access-Control-Allow-Origin" not in refused.headers


async def test_a_site_id_pasted_with_spaces_around_it_is_the_site(prod, client, database_url, workspace):
    """A data-site attribute or environment variable pasted with a space or newline: the analytics reads
    take such a siteId as the site, so ingestion does too (production answered 404 unknown site, and
    development created a second site named with the spaces, where the events vanished)."""
    site, domain = await register_site(database_url, workspace)
    for app in (prod, client):
        resp = await post_event(app, {"s": f" {site}\n", "n": "pageview"}, {"Origin": f"https://{domain}"})
        assert resp.status == 202, await resp.text()
    assert len(await stored_events(database_url, site)) == 2
    assert await stored_events(database_url, f" {site}\n") == []
    blank = await post_event(client, {"s": " \t", "n": "pageview"})
    assert blank.status == 400
    assert (await blank.json())["issues"] == [{"field": "s", "message": "must not be blank"}]
