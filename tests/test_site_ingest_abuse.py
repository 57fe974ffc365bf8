"""Abuse protection and enrichment of site events: rate limits, bots, IP hashing, countries."""

from __future__ import annotations

import dataclasses
import hashlib
import secrets

import pytest

from tests.site_helpers import INGEST, post_event, stored_events

PROXY = {"trusted_proxies": ("127.0.0.1/32",)}


def dev_site() -> str:
    return f"dev-{secrets.token_hex(6)}"


def from_ip(ip: str) -> dict[str, str]:
    return {"X-Forwarded-For": ip}


async def _rejected(client, reason: str) -> float:
    text = await (await client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(f'tally_events_rejected_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


async def test_per_ip_limit_drops_silently(make_client, settings, database_url):
    client = await make_client(dataclasses.replace(settings, ip_events_per_min=3, **PROXY))
    site = dev_site()
    statuses = [(await post_event(client, {"s": site, "n": "pageview"}, from_ip("198.51.100.9"))).status
                for _ in range(5)]
    assert statuses == [202] * 5
    assert len(await stored_events(database_url, site)) == 3
    # Another visitor of the same site still gets through.
    assert (await post_event(client, {"s": site, "n": "pageview"}, from_ip("198.51.100.10"))).status == 202
    assert len(await stored_events(database_url, site)) == 4
    assert await _rejected(client, "rate_limited_ip") >= 2


async def test_per_site_limit_drops_silently(make_client, settings, database_url):
    client = await make_client(dataclasses.replace(settings, site_events_per_min=2, **PROXY))
    site = dev_site()
    for i in range(4):
        resp = await post_event(client, {"s": site, "n": "pageview"}, from_ip(f"198.51.100.{i + 1}"))
        assert resp.status == 202 and await resp.read() == b""
    assert len(await stored_events(database_url, site)) == 2
    assert await _rejected(client, "rate_limited_site") >= 2


async def test_zero_disables_the_limits(make_client, settings, database_url):
    client = await make_client(dataclasses.replace(settings, site_events_per_min=0, ip_events_per_min=0))
    site = dev_site()
    for _ in range(5):
        await post_event(client, {"s": site, "n": "pageview"})
    assert len(await stored_events(database_url, site)) == 5


@pytest.mark.parametrize("user_agent", [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/124.0 Safari/537.36",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "curl/8.4.0",
    "",
])
async def test_bots_from_pages_are_dropped(client, database_url, user_agent):
    site = dev_site()
    resp = await client.post(INGEST, data=b'{"s": "%s", "n": "pageview"}' % site.encode(),
                             headers={"User-Agent": user_agent, "Origin": "https://x.example"})
    assert resp.status == 202
    assert await stored_events(database_url, site) == []
    assert await _rejected(client, "bot") >= 1


async def test_crawler_without_origin_is_dropped_but_http_clients_are_not(client, database_url):
    site = dev_site()
    googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    assert (await client.post(INGEST, json={"s": site, "n": "a"}, headers={"User-Agent": googlebot})).status == 202
    for ua in ("curl/8.4.0", "python-requests/2.32", "Go-http-client/1.1", "node-fetch/1.0", ""):
        assert (await client.post(INGEST, json={"s": site, "n": "b"}, headers={"User-Agent": ua})).status == 202
    names = [r["name"] for r in await stored_events(database_url, site)]
    assert names == ["b"] * 5


async def test_ip_hash_uses_forwarded_client_behind_trusted_proxy(make_client, settings, database_url):
    client = await make_client(dataclasses.replace(settings, **PROXY))
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.50"))
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.51"))
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.50"))
    hashes = [r["ip_hash"] for r in await stored_events(database_url, site)]
    assert hashes[0] == hashes[2] != hashes[1]
    salt = hashlib.sha256(b"tally-ip-hash:" + settings.secret.encode()).digest()
    assert hashes[0] == hashlib.sha256(salt + b"203.0.113.50").hexdigest()[:16]


async def test_forwarded_header_is_ignored_without_trusted_proxies(client, database_url):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.50"))
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.51"))
    rows = await stored_events(database_url, site)
    assert rows[0]["ip_hash"] == rows[1]["ip_hash"]


@pytest.mark.parametrize(("headers", "country"), [
    ({"CF-IPCountry": "fr"}, "FR"),
    ({"CloudFront-Viewer-Country": "JP"}, "JP"),
    ({"X-Vercel-IP-Country": "br"}, "BR"),
    ({"Fastly-Client-Country": "CA"}, "CA"),
    ({"X-Country-Code": "au"}, "AU"),
    ({"CF-IPCountry": "XX"}, None),
    ({"CF-IPCountry": "T1"}, None),
    ({"CF-IPCountry": "USA"}, None),
    ({"CF-IPCountry": "XX", "X-Country-Code": "nl"}, "NL"),
    ({}, None),
])
async def test_country_from_cdn_headers(client, database_url, headers, country):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview"}, headers)
    [row] = await stored_events(database_url, site)
    assert row["country"] == country


async def test_country_from_maxmind_database(make_client, settings, database_url, tmp_path):
    from mmdb_writer import MMDBWriter
    from netaddr import IPSet

    writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="GeoLite2-Country")
    writer.insert_network(IPSet(["203.0.113.0/24"]), {"country": {"iso_code": "NZ"}})
    path = tmp_path / "country.mmdb"
    writer.to_db_file(str(path))
    client = await make_client(dataclasses.replace(settings, geoip_db=str(path), **PROXY))
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("203.0.113.7"))
    await post_event(client, {"s": site, "n": "pageview"}, from_ip("198.51.100.7"))
    await post_event(client, {"s": site, "n": "pageview"}, {**from_ip("203.0.113.8"), "CF-IPCountry": "IE"})
    assert [r["country"] for r in await stored_events(database_url, site)] == ["NZ", None, "IE"]


async def test_missing_geoip_database_does_not_stop_ingestion(make_client, settings, database_url, tmp_path):
    client = await make_client(dataclasses.replace(settings, geoip_db=str(tmp_path / "absent.mmdb")))
    site = dev_site()
    assert (await post_event(client, {"s": site, "n": "pageview"})).status == 202
    assert len(await stored_events(database_url, site)) == 1
