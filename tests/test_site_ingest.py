"""POST /api/service/event: validation, error bodies, stored rows, enrichment (development mode)."""

from __future__ import annotations

import re
import secrets

import asyncpg
import orjson
import pytest

from tests.conftest import metric
from tests.site_helpers import BROWSER_UA, INGEST, post_event, stored_events


def dev_site() -> str:
    return f"dev-{secrets.token_hex(6)}"


async def test_pageview_is_stored_with_every_field(client, database_url):
    site = dev_site()
    body = {"s": site, "n": "pageview", "u": "https://shop.example/a?b=1", "p": "/a?b=1",
            "r": "https://google.com/", "t": "Title", "w": 1280, "props": {"plan": "pro", "n": [1, 2]},
            "sid": "abc123", "v": "1.2.3", "ts": 1700000000000}
    resp = await post_event(client, body, {"CF-IPCountry": "de"})
    assert resp.status == 202
    assert await resp.read() == b""
    [row] = await stored_events(database_url, site)
    assert row["id"].startswith("evt_")
    assert (row["name"], row["url"], row["path"], row["referrer"], row["title"], row["viewport_w"]) == (
        "pageview", "https://shop.example/a?b=1", "/a?b=1", "https://google.com/", "Title", 1280)
    assert row["properties"] == {"plan": "pro", "n": [1, 2]}
    assert row["session_id"] == "abc123"
    assert row["country"] == "DE"
    assert row["env"] == "live"
    assert row["ts"] == row["received_at"]
    assert re.fullmatch(r"[0-9a-f]{16}", row["ip_hash"])
    # v and ts are validated and not stored; the raw IP appears nowhere.
    assert "127.0.0.1" not in orjson.dumps({k: str(v) for k, v in row.items()}).decode()


async def test_unknown_site_is_auto_created_in_default_workspace(client, database_url):
    site = dev_site()
    assert (await post_event(client, {"s": site, "n": "signup"})).status == 202
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT s.domain, s.verified_at, w.name FROM sites s JOIN workspaces w ON w.id = s.workspace_id "
            "WHERE s.id = $1", site)
    finally:
        await conn.close()
    assert row["name"] == "default" and row["domain"] == site and row["verified_at"] is None
    [event] = await stored_events(database_url, site)
    assert event["name"] == "signup" and event["properties"] is None


async def test_application_json_and_json_props_of_any_type(client, database_url):
    site = dev_site()
    for props in ([1, "a"], "text", 3.5, None):
        resp = await post_event(client, {"s": site, "n": "custom", "props": props}, content_type="application/json")
        assert resp.status == 202
    rows = await stored_events(database_url, site)
    assert sorted(map(repr, (r["properties"] for r in rows))) == sorted(map(repr, ([1, "a"], "text", 3.5, None)))


@pytest.mark.parametrize("body", [b"", b"{", b"not json", b"{'s': 1}", b'{"s":"a",}',
                                  b'{"s":"a","n":"pageview","t":"caf\xe9"}'])  # Latin-1, not UTF-8
async def test_invalid_json(client, body):
    resp = await post_event(client, body)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid json"}


def _fields(payload: dict) -> set[str]:
    assert payload["error"] == "invalid payload"
    return {issue["field"] for issue in payload["issues"]}


@pytest.mark.parametrize(("field", "limit"), [("n", 64), ("u", 2048), ("p", 2048), ("r", 2048), ("t", 512),
                                              ("sid", 64)])
async def test_string_limits(client, database_url, field, limit):
    site = dev_site()
    ok = {"s": site, "n": "pageview", field: "x" * limit}
    assert (await post_event(client, ok)).status == 202
    resp = await post_event(client, {**ok, field: "x" * (limit + 1)})
    assert resp.status == 400
    assert _fields(await resp.json()) == {field}
    assert len(await stored_events(database_url, site)) == 1


@pytest.mark.parametrize(("field", "value"), [
    ("s", 5), ("n", None), ("n", ""), ("u", 1), ("p", ["/"]), ("r", {}), ("t", True), ("w", "wide"),
    ("w", True), ("sid", 7), ("sid", ""), ("visit", "later"), ("visit", 1), ("v", 1), ("ts", "yesterday"),
])
async def test_wrong_types(client, field, value):
    resp = await post_event(client, {"s": dev_site(), "n": "pageview", field: value})
    assert resp.status == 400
    body = await resp.json()
    assert _fields(body) == {field}
    assert all(issue["message"] for issue in body["issues"])


async def test_a_blank_name_is_refused_and_a_padded_one_kept_as_sent(client, database_url):
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "  \t "})
    assert resp.status == 400
    assert (await resp.json())["issues"] == [{"field": "n", "message": "must not be blank"}]
    assert (await post_event(client, {"s": site, "n": " Sign up "})).status == 202
    assert [e["name"] for e in await stored_events(database_url, site)] == [" Sign up "]


async def test_every_failing_field_is_reported(client):
    resp = await post_event(client, {"n": "x" * 65, "t": "y" * 513, "w": "wide", "u": None})
    assert resp.status == 400
    assert _fields(await resp.json()) == {"s", "n", "t", "w"}


async def test_missing_required_fields(client):
    resp = await post_event(client, {})
    assert resp.status == 400
    body = await resp.json()
    assert {(i["field"], i["message"]) for i in body["issues"]} == {("s", "required"), ("n", "required")}


async def test_non_object_body_and_nul_characters(client):
    resp = await post_event(client, [1, 2])
    assert resp.status == 400 and (await resp.json())["error"] == "invalid payload"
    resp = await post_event(client, {"s": dev_site(), "n": "a\u0000b", "props": {"k": "\u0000"}})
    assert resp.status == 400
    assert _fields(await resp.json()) == {"n", "props"}


async def test_unknown_fields_are_ignored_and_nulls_mean_absent(client, database_url):
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "pageview", "extra": 1, "u": None, "w": None, "sid": None})
    assert resp.status == 202
    [row] = await stored_events(database_url, site)
    assert row["url"] is None and row["viewport_w"] is None and row["session_id"] is not None


async def test_out_of_range_viewport_is_not_stored(client, database_url):
    site = dev_site()
    for w in (-5, 10**12, 1280.6):
        assert (await post_event(client, {"s": site, "n": "pageview", "w": w})).status == 202
    rows = await stored_events(database_url, site)
    assert sorted(r["viewport_w"] for r in rows if r["viewport_w"] is not None) == [1281]


async def test_body_over_32_kb_is_413(client):
    resp = await post_event(client, {"s": dev_site(), "n": "big", "props": {"x": "y" * 33_000}})
    assert resp.status == 413
    assert (await resp.json())["error"] == "payload too large"


async def test_store_failure_is_500(client, database_url, monkeypatch):
    from storage import events as event_store

    async def broken(conn, records):
        raise asyncpg.PostgresError("disk full")

    monkeypatch.setattr(event_store, "copy_events", broken)
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "pageview"})
    assert resp.status == 500
    assert await resp.json() == {"error": "store failed"}
    assert await stored_events(database_url, site) == []


async def test_development_mirrors_any_origin(client):
    origin = "http://localhost:3000"
    resp = await post_event(client, {"s": dev_site(), "n": "pageview"}, {"Origin": origin})
    assert resp.status == 202
    assert resp.headers["Access-Control-Allow-Origin"] == origin
    assert "Origin" in resp.headers["Vary"]
    pre = await client.options(INGEST, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": "content-type"})
    assert pre.status == 204
    assert pre.headers["Access-Control-Allow-Origin"] == origin
    assert pre.headers["Access-Control-Max-Age"] == "86400"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert "content-type" in pre.headers["Access-Control-Allow-Headers"].lower()
    # Errors are readable by the page too.
    bad = await post_event(client, b"{", {"Origin": origin})
    assert bad.status == 400 and bad.headers["Access-Control-Allow-Origin"] == origin


async def test_metrics_count_rejections(client):
    before = await (await client.get("/metrics")).text()
    assert (await post_event(client, b"{}")).status == 400
    assert (await post_event(client, {"s": "metrics-unknown", "n": ""})).status == 400
    after = await (await client.get("/metrics")).text()
    rejected = "tally_events_rejected_total"
    assert metric(after, rejected, reason="invalid") - metric(before, rejected, reason="invalid") == 2


async def test_chunked_body_is_read_whole_and_capped(client, database_url):
    import asyncio

    site = dev_site()
    payload = orjson.dumps({"s": site, "n": "pageview", "t": "x" * 500, "props": {"pad": "y" * 20_000}})

    async def pieces(data: bytes):
        for i in range(0, len(data), 1000):
            yield data[i:i + 1000]
            await asyncio.sleep(0)

    resp = await client.post(INGEST, data=pieces(payload), headers={"Content-Type": "text/plain"})
    assert resp.status == 202
    assert len(await stored_events(database_url, site)) == 1
    big = orjson.dumps({"s": site, "n": "pageview", "props": {"pad": "y" * 40_000}})
    resp = await client.post(INGEST, data=pieces(big), headers={"Content-Type": "text/plain"})
    assert resp.status == 413 and (await resp.json())["error"] == "payload too large"


@pytest.mark.parametrize("depth", [65, 300, 5000])
async def test_deeply_nested_props_are_400_invalid_payload(client, database_url, caplog, depth):
    """Deep props once crashed the decoder or the encoder (a 500 and a traceback per request)."""
    site = dev_site()
    body = b'{"s":"' + site.encode() + b'","n":"a","props":' + b"[" * depth + b"]" * depth + b"}"
    resp = await post_event(client, body)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid payload",
                                 "issues": [{"field": "props", "message": "nests deeper than 64 levels"}]}
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert await stored_events(database_url, site) == []
    # 64 levels are stored as sent.
    ok = await post_event(client, b'{"s":"' + site.encode() + b'","n":"a","props":' + b"[" * 64 + b"]" * 64 + b"}")
    assert ok.status == 202


async def test_unknown_site_in_development_is_announced_once_in_the_log(client, database_url, caplog):
    """Auto-created in the 'default' workspace, the events were invisible to the user's own workspace:
    one warning line per unknown site says where they went."""
    site = dev_site()
    with caplog.at_level("WARNING", logger="tally.ingest"):
        for _ in range(3):
            assert (await post_event(client, {"s": site, "n": "pageview"})).status == 202
    lines = [r.getMessage() for r in caplog.records if r.name == "tally.ingest"]
    assert len(lines) == 1
    assert lines[0].startswith(f"unknown site id '{site}': created it in workspace 'default'")
    assert "POST /api/sites" in lines[0]
    assert len(await stored_events(database_url, site)) == 3


async def test_a_body_that_does_not_decode_by_its_content_encoding_is_invalid_json(client, database_url):
    site = dev_site()
    resp = await post_event(client, {"s": site, "n": "pageview"}, {"Content-Encoding": "gzip"})
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid json"}
    assert resp.headers["Connection"] == "close"
    assert await stored_events(database_url, site) == []


async def test_a_page_url_without_a_path_gives_the_path(client, database_url, workspace, login):
    """`p` is optional: a sender that gives only the page URL `u` (a backend, a port of Plausible's `url`)
    gets `p` from it, path and query, so its pageviews count under their page in every page list, as
    its UTM tags already did. Without a path they were in no page list, entry or exit page at all."""
    from tests.site_helpers import register_site

    site_id, domain = await register_site(database_url, workspace)
    await login()
    for body in ({"u": f"https://{domain}/landing?utm_source=news#top"}, {"u": f"https://{domain}"},
                 {"u": f"https://{domain}/x", "p": "/as-sent"}, {"u": "relative/page"}):
        assert (await post_event(client, {"s": site_id, "n": "pageview", **body})).status == 202
    rows = await stored_events(database_url, site_id)
    assert [(r["url"], r["path"]) for r in rows] == [
        (f"https://{domain}/landing?utm_source=news#top", "/landing?utm_source=news"), (f"https://{domain}", "/"),
        (f"https://{domain}/x", "/as-sent"), ("relative/page", None)]
    resp = await client.get("/api/analytics/top-pages", params={"siteId": site_id, "range": "1h"})
    assert [(r["key"], r["count"]) for r in (await resp.json())["data"]] == [("/", 1), ("/as-sent", 1), ("/landing", 1)]


async def test_page_paths_are_stored_percent_decoded_as_plausible_does(client, database_url, workspace, login):
    """Browsers send location.pathname percent-encoded: the page is stored decoded (Plausible's pathname), so
    lists show /über and `filter=page==/über` matches it. Queries stay as sent; escapes that are not UTF-8,
    or that spell ? # or a control character, are kept as sent."""
    from tests.site_helpers import register_site

    site_id, domain = await register_site(database_url, workspace)
    await login()
    for p in ("/%C3%BCber", "/%C3%BCber?q=%C3%A9", "/bad%FF", "/a%3Fb", "/nul%00"):
        assert (await post_event(client, {"s": site_id, "n": "pageview", "p": p})).status == 202
    plausible = await client.post("/api/event", json={"n": "pageview", "d": domain,
                                                      "u": f"https://{domain}/caf%C3%A9#/r%C3%A9sum%C3%A9", "h": 1},
                                  headers={"User-Agent": BROWSER_UA})
    assert plausible.status == 202, await plausible.text()
    rows = await stored_events(database_url, site_id)
    assert sorted(r["path"] for r in rows) == sorted(
        ["/über", "/über?q=%C3%A9", "/bad%FF", "/a%3Fb", "/nul%00", "/café#/résumé"])
    resp = await client.get("/api/analytics/top-pages", params={"siteId": site_id, "range": "1h"})
    assert ("/über", 2) in [(r["key"], r["count"]) for r in (await resp.json())["data"]]
    resp = await client.get("/api/analytics/overview",
                            params={"siteId": site_id, "range": "1h", "filter": "page==/über"})
    assert (await resp.json())["totalPageviews"] == 2


@pytest.mark.parametrize("decoded", [1_000_000, 20_000_000])
async def test_a_compressed_body_is_capped_at_32_kb_once_decoded(client, database_url, decoded):
    """The 32 KB cap is on the event, not on its wire size: a 1 KB gzip body of a 1 MB event was stored
    whole (up to the app's 8 MB), so any page could store megabytes per event; past 8 MB it was
    aiohttp's own 413 body, without the limit."""
    import gzip

    site = dev_site()
    big = gzip.compress(orjson.dumps({"s": site, "n": "big", "props": {"x": "y" * decoded}}))
    assert len(big) < 32 * 1024
    resp = await post_event(client, big, {"Content-Encoding": "gzip"})
    assert resp.status == 413
    assert await resp.json() == {"error": "payload too large", "limit": 32768}
    assert await stored_events(database_url, site) == []
    small = gzip.compress(orjson.dumps({"s": site, "n": "small", "props": {"x": "y" * 20_000}}))
    assert (await post_event(client, small, {"Content-Encoding": "gzip"})).status == 202
    assert [r["name"] for r in await stored_events(database_url, site)] == ["small"]
