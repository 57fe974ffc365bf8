"""Visit dimensions captured at ingestion and stored in the events' 0013 columns: browser and OS from the
User-Agent (ua-parser), device class from the viewport width (or the User-Agent), UTM fields and their
aliases, source, channel, and region/city from a GeoIP City database."""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from app.acquisition import CHANNEL_RULES, acquisition, channel_of
from app.useragent import parse_client
from storage.site_filters import CHANNELS
from tests.conftest import bearer
from tests.site_helpers import post_event, stored_events

PROXY = {"trusted_proxies": ("127.0.0.1/32",)}

UA = {
    "chrome_windows": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
                      "Chrome/124.0.0.0 Safari/537.36",
    "safari_mac": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                  "Version/17.4.1 Safari/605.1.15",
    "firefox_ubuntu": "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
    "edge_windows": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
                    "Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.51",
    "safari_iphone": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
                     "Gecko) Version/17.4.1 Mobile/15E148 Safari/604.1",
    "safari_ipad": "Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                   "Version/16.6 Mobile/15E148 Safari/604.1",
    "chrome_android": "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
                      "Chrome/124.0.6367.82 Mobile Safari/537.36",
    "chrome_android_tablet": "Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) "
                             "Chrome/123.0.0.0 Safari/537.36",
    "samsung_internet": "Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) "
                        "SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36",
    "chrome_ios": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                  "CriOS/124.0.6367.88 Mobile/15E148 Safari/604.1",
    "firefox_ios": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                   "FxiOS/125.0 Mobile/15E148 Safari/605.1.15",
    "opera_windows7": "Mozilla/5.0 (Windows NT 6.1; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
                      "Chrome/123.0.0.0 Safari/537.36 OPR/109.0.0.0",
    "chrome_os": "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) "
                 "Chrome/124.0.0.0 Safari/537.36",
}

# (browser, browser_version, os, os_version, device without a width)
EXPECTED_CLIENTS = {
    "chrome_windows": ("Chrome", "124", "Windows", "10", "Desktop"),
    "safari_mac": ("Safari", "17", "macOS", "10.15", "Desktop"),
    "firefox_ubuntu": ("Firefox", "125", "Ubuntu", None, "Desktop"),
    "edge_windows": ("Edge", "124", "Windows", "10", "Desktop"),
    "safari_iphone": ("Safari", "17", "iOS", "17.4", "Mobile"),
    "safari_ipad": ("Safari", "16", "iOS", "16.6", "Tablet"),
    "chrome_android": ("Chrome", "124", "Android", "14", "Mobile"),
    "chrome_android_tablet": ("Chrome", "123", "Android", "13", "Tablet"),
    "samsung_internet": ("Samsung Internet", "24", "Android", "14", "Mobile"),
    "chrome_ios": ("Chrome", "124", "iOS", "17.4", "Mobile"),
    "firefox_ios": ("Firefox", "125", "iOS", "17.4", "Mobile"),
    "opera_windows7": ("Opera", "109", "Windows", "7", "Desktop"),
    "chrome_os": ("Chrome", "124", "Chrome OS", "14541", "Desktop"),
}

DIMENSIONS = ("browser", "browser_version", "os", "os_version", "device", "utm_source", "utm_medium",
              "utm_campaign", "utm_term", "utm_content", "source", "channel", "region", "city")


def dev_site() -> str:
    return f"dev-{secrets.token_hex(6)}"


def dims(row: dict, *names: str) -> tuple:
    return tuple(row[n] for n in names)


@pytest.mark.parametrize("name", list(EXPECTED_CLIENTS))
async def test_browser_os_and_device_from_the_user_agent(client, database_url, name):
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "pageview", "u": "https://shop.example/"},
                            {"User-Agent": UA[name]})
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert dims(row, "browser", "browser_version", "os", "os_version", "device") == EXPECTED_CLIENTS[name]


def test_parses_are_cached_per_user_agent():
    from app.useragent import _parse

    ua = UA["safari_iphone"] + " tally-cache-probe"
    before = _parse.cache_info()
    assert parse_client(ua) == parse_client(ua) == parse_client(f"  {ua} ")
    after = _parse.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)


@pytest.mark.parametrize(("width", "device"), [
    (320, "Mobile"), (575, "Mobile"), (576, "Tablet"), (991, "Tablet"), (992, "Laptop"), (1439, "Laptop"),
    (1440, "Desktop"), (2560, "Desktop"), (375.6, "Mobile"),
])
async def test_device_class_from_the_viewport_width(client, database_url, width, device):
    site = dev_site()
    # The width wins over the User-Agent: a desktop browser in a narrow window is Mobile.
    await post_event(client, {"s": site, "n": "pageview", "w": width}, {"User-Agent": UA["chrome_windows"]})
    [row] = await stored_events(database_url, site)
    assert row["device"] == device


async def test_api_event_without_width_or_user_agent_has_no_client_dimensions(client, database_url):
    site = dev_site()
    resp = await client.post("/api/service/event", json={"s": site, "n": "signup"},
                             skip_auto_headers=["User-Agent"])
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert dims(row, "browser", "browser_version", "os", "os_version", "device") == (None,) * 5


async def test_utm_fields_are_stored_from_the_page_url(client, database_url):
    site = dev_site()
    url = ("https://shop.example/launch?utm_source=newsletter&utm_medium=email&utm_campaign=autumn%20sale"
           "&utm_term=running+shoes&utm_content=hero-banner")
    await post_event(client, {"s": site, "n": "pageview", "u": url, "r": "https://www.google.com/"})
    [row] = await stored_events(database_url, site)
    assert dims(row, "utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "source",
                "channel") == ("newsletter", "email", "autumn sale", "running shoes", "hero-banner", "newsletter",
                               "Email")
    # The stored event fields of the spec are unchanged.
    assert row["url"] == url and row["referrer"] == "https://www.google.com/"


@pytest.mark.parametrize(("query", "utm_source", "source"), [
    ("?ref=producthunt", "producthunt", "Product Hunt"),
    ("?source=alice-blog", "alice-blog", "alice-blog"),
    ("?via=partner", "partner", "partner"),
    ("?ref=a&source=b&via=c", "b", "b"),  # source, then ref, then via
    ("?utm_source=ig&ref=x", "ig", "Instagram"),  # utm_source wins over its aliases
    ("?utm_source=GOOGLE", "GOOGLE", "Google"),
    ("?utm_source=", None, None),
])
async def test_utm_source_aliases(client, database_url, query, utm_source, source):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview", "u": f"https://shop.example/{query}"})
    [row] = await stored_events(database_url, site)
    assert (row["utm_source"], row["source"]) == (utm_source, source)


async def test_utm_fields_from_the_path_when_no_url_is_sent(client, database_url):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview", "p": "/pricing?utm_source=twitter&utm_medium=social"})
    [row] = await stored_events(database_url, site)
    assert dims(row, "utm_source", "utm_medium", "source", "channel") == (
        "twitter", "social", "Twitter", "Organic Social")


@pytest.mark.parametrize(("referrer", "source"), [
    ("https://www.google.com/", "Google"),
    ("https://www.google.co.uk/search?q=x", "Google"),
    ("https://google.de/", "Google"),
    ("https://news.google.com/articles/1", "Google"),
    ("https://www.bing.com/search?q=tally", "Bing"),
    ("https://duckduckgo.com/", "DuckDuckGo"),
    ("https://search.yahoo.co.jp/", "Yahoo!"),
    ("https://yandex.com.tr/", "Yandex"),
    ("https://l.facebook.com/l.php?u=x", "Facebook"),
    ("https://t.co/abc", "Twitter"),
    ("https://news.ycombinator.com/item?id=1", "Hacker News"),
    ("https://www.reddit.com/r/selfhosted/", "Reddit"),
    ("https://m.youtube.com/watch?v=1", "YouTube"),
    ("https://mail.google.com/mail/u/0/", "Gmail"),
    ("https://en.m.wikipedia.org/wiki/Web_analytics", "Wikipedia"),
    ("https://www.someblog.net/post/1", "someblog.net"),
    ("http://blog.example.org:8080/x", "blog.example.org"),
    ("https://www.shop.example/pricing", None),  # the page's own host: internal navigation
    ("http://localhost:3000/", None),
    ("android-app://com.google.android.gm", None),
    ("not a url", None),
    ("", None),
])
async def test_source_from_the_referrer(client, database_url, referrer, source):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview", "u": "https://shop.example/", "r": referrer})
    [row] = await stored_events(database_url, site)
    assert row["source"] == source


# One case per channel: (page query, referrer, expected channel).
CHANNEL_CASES = [
    ("", None, "Direct"),
    ("", "https://www.google.com/", "Organic Search"),
    ("?gclid=Cj0KCQ", "https://www.google.com/", "Paid Search"),
    ("?utm_source=bing&utm_medium=cpc", None, "Paid Search"),
    ("", "https://www.linkedin.com/feed/", "Organic Social"),
    ("?utm_source=facebook&utm_medium=paid-social", None, "Paid Social"),
    ("?utm_source=fb_ad_partner&utm_medium=social", None, "Organic Social"),
    ("?utm_source=newsletter&utm_medium=email", None, "Email"),
    ("", "https://mail.google.com/", "Email"),
    ("?utm_source=partner&utm_medium=affiliate", None, "Affiliates"),
    ("?utm_source=adnetwork&utm_medium=banner", None, "Display"),
    ("", "https://www.youtube.com/watch?v=1", "Video"),
    ("?utm_source=youtube&utm_medium=cpv", None, "Video"),
    ("", "https://www.someblog.net/post", "Referral"),
    ("?utm_medium=referral", None, "Referral"),
    ("?utm_source=podcast&utm_medium=audio", None, "Other"),
    ("?utm_source=sms", None, "Other"),
    ("?utm_campaign=cross-network-q4&utm_source=google", None, "Other"),
    ("?utm_medium=ppc&utm_source=adnetwork", None, "Other"),
]


@pytest.mark.parametrize(("query", "referrer", "channel"), CHANNEL_CASES)
async def test_channel_of_each_kind_of_visit(client, database_url, query, referrer, channel):
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview", "u": f"https://shop.example/{query}", "r": referrer})
    [row] = await stored_events(database_url, site)
    assert row["channel"] == channel


def test_every_channel_is_reachable_and_in_the_shared_vocabulary():
    produced = {c for _, _, c in CHANNEL_CASES}
    assert produced == set(CHANNELS)
    assert {c for c, _ in CHANNEL_RULES} | {"Direct"} == set(CHANNELS)
    assert channel_of(None, None, None, None) == "Direct"


def test_acquisition_ignores_fragment_and_blank_values():
    assert tuple(acquisition("https://a.example/?utm_source=acme#utm_medium=y", None)) == (
        "acme", None, None, None, None, "acme", "Referral")
    assert tuple(acquisition("https://a.example/?utm_source=%20%20", None)) == (
        None, None, None, None, None, None, "Direct")


def _city_database(path, database_type: str = "GeoLite2-City") -> str:
    from mmdb_writer import MMDBWriter
    from netaddr import IPSet

    writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type=database_type)
    writer.insert_network(IPSet(["203.0.113.0/24"]), {
        "country": {"iso_code": "DE"},
        "subdivisions": [{"iso_code": "BY", "names": {"en": "Bavaria", "de": "Bayern"}}],
        "city": {"names": {"en": "Munich", "de": "München"}},
    })
    writer.insert_network(IPSet(["198.51.100.0/24"]), {"country": {"iso_code": "NZ"}})
    writer.to_db_file(str(path))
    return str(path)


async def test_region_and_city_from_a_city_database(make_client, settings, database_url, tmp_path):
    client = await make_client(dataclasses.replace(settings, geoip_db=_city_database(tmp_path / "c.mmdb"),
                                                   **PROXY))
    site = dev_site()
    for headers in ({"X-Forwarded-For": "203.0.113.7"},  # in the database: country, region, city
                    {"X-Forwarded-For": "198.51.100.7"},  # a country without a city
                    {"X-Forwarded-For": "192.0.2.1"},  # not in the database
                    {"X-Forwarded-For": "203.0.113.8", "CF-IPCountry": "DE"},  # the CDN agrees
                    {"X-Forwarded-For": "203.0.113.9", "CF-IPCountry": "AT"}):  # the CDN disagrees: it wins
        assert (await post_event(client, {"s": site, "n": "pageview"}, headers)).status == 202
    rows = await stored_events(database_url, site)
    assert [dims(r, "country", "region", "city") for r in rows] == [
        ("DE", "Bavaria", "Munich"), ("NZ", None, None), (None, None, None), ("DE", "Bavaria", "Munich"),
        ("AT", None, None)]


async def test_a_country_database_gives_no_region_or_city(make_client, settings, database_url, tmp_path):
    path = _city_database(tmp_path / "country.mmdb", database_type="GeoLite2-Country")
    client = await make_client(dataclasses.replace(settings, geoip_db=path, **PROXY))
    site = dev_site()
    await post_event(client, {"s": site, "n": "pageview"}, {"X-Forwarded-For": "203.0.113.7"})
    [row] = await stored_events(database_url, site)
    assert dims(row, "country", "region", "city") == ("DE", None, None)


async def test_keyed_events_leave_the_dimensions_null(client, make_key, database_url):
    from tests.conftest import connect

    key = await make_key("write")
    resp = await client.post("/v1/events", json={"event": "signup", "user_id": "u_1"}, headers=bearer(key))
    assert resp.status == 200
    event_id = (await resp.json())["id"]
    conn = await connect(database_url)
    try:
        row = await conn.fetchrow("SELECT * FROM events WHERE id = $1", event_id)
    finally:
        await conn.close()
    assert dims(dict(row), *DIMENSIONS) == (None,) * len(DIMENSIONS)


async def test_a_percent_encoded_nul_in_a_utm_value_is_dropped_not_fatal(client, database_url):
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "pageview", "u": "https://shop.example/?utm_source=a%00b"})
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert (row["utm_source"], row["source"]) == ("ab", "ab")


def test_user_agents_the_parser_cannot_take_as_is():
    assert parse_client("Mozilla/5.0 \udcff\udcfe Firefox/99.0").browser == "Firefox"
    assert parse_client("Mozilla/5.0 Fire\x00fox/99.0").browser == "Firefox"  # NUL dropped before parsing


async def test_non_utf8_user_agent_bytes_on_the_wire(client, database_url):
    import asyncio

    import orjson

    site = dev_site()
    body = orjson.dumps({"s": site, "n": "pageview"})
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    writer.write(b"POST /api/service/event HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
                 b"User-Agent: Mozilla/5.0 \xff\xfe Firefox/99.0\r\nConnection: close\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    assert status_line.split()[1] == b"202"
    [row] = await stored_events(database_url, site)
    assert row["browser"] == "Firefox"
