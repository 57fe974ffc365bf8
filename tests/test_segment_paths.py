"""Paths Segment's other SDKs use: analytics-ruby sends its batches to /v1/import and analytics-java to
/v1/import/ (Segment's import endpoint, the batch call under its older name); analytics.js in a browser loads
its settings, is preflighted, and batches to /v1/b."""

from __future__ import annotations

import json

import pytest

from tests.conftest import bearer
from tests.test_segment_api import basic, create_source, events, mid


@pytest.mark.parametrize("path", ["/v1/import", "/v1/import/"])
async def test_import_is_the_batch_call(client, make_key, path):
    key = await make_key()
    h = basic((await create_source(client, key))["write_key"])
    message = {"type": "track", "userId": "rb_user", "event": "Order Completed", "messageId": mid()}
    for _ in range(2):  # a retry: stored once
        resp = await client.post(path, headers=h, json={"batch": [message], "sentAt": "2026-11-27T10:00:00Z"})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["success"] is True and "X-RateLimit-Limit" in resp.headers
    assert [e["event"] for e in await events(client, key, user_id="rb_user")] == ["order_completed"]
    resp = await client.post(path, json={"batch": [message]})
    assert resp.status == 401 and set(await resp.json()) == {"code", "message"}


# --- analytics.js in a browser (its Chromium test: tests/browser/test_segment_browser.py) ---------------------

async def test_batching_mode_posts_to_b(client, make_key):
    key = await make_key()
    h = basic((await create_source(client, key))["write_key"])
    message = {"type": "track", "userId": "ajs_user", "event": "Signed Up", "messageId": mid()}
    resp = await client.post("/v1/b", headers={**h, "Content-Type": "text/plain"},
                             data=json.dumps({"batch": [message], "sentAt": "2026-11-27T10:00:00Z"}))
    assert resp.status == 200, await resp.text()
    assert [e["event"] for e in await events(client, key, user_id="ajs_user")] == ["signed_up"]


@pytest.mark.parametrize("path", ["/v1/t", "/v1/b", "/v1/track", "/v1/identify", "/v1/batch"])
async def test_preflight_allows_any_origin_with_the_sdks_headers(client, path):
    resp = await client.options(path, headers={
        "Origin": "https://shop.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-retry-count,x-shop"})
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "https://shop.example"
    assert resp.headers["Vary"] == "Origin"
    assert resp.headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
    allowed = {h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-retry-count", "x-shop"} <= allowed
    assert "Access-Control-Allow-Credentials" not in resp.headers


async def test_answers_are_readable_by_the_page_errors_included(client, make_key):
    key = await make_key()
    h = {**basic((await create_source(client, key))["write_key"]), "Origin": "https://shop.example"}
    ok = await client.post("/v1/t", headers=h, json={"event": "A", "userId": "u", "messageId": mid()})
    bad = await client.post("/v1/t", headers=h, json={"userId": "u"})  # a track without event
    unknown = await client.post("/v1/t", headers={**basic("wk_unknown_key"), "Origin": "https://shop.example"},
                                json={"event": "A", "userId": "u"})
    assert (ok.status, bad.status, unknown.status) == (200, 400, 401)
    for resp in (ok, bad, unknown):
        assert resp.headers["Access-Control-Allow-Origin"] == "https://shop.example"
    # Tally's own identify (a Bearer key) is not for pages: no CORS on its answer.
    tally = await client.post("/v1/identify", headers={**bearer(key), "Origin": "https://shop.example"},
                              json={"user_id": "u", "traits": {"plan": "pro"}})
    assert tally.status < 300 and "Access-Control-Allow-Origin" not in tally.headers


async def test_settings_name_this_service_and_follow_the_source(client, make_key):
    key = await make_key()
    created = await create_source(client, key)
    wk = created["write_key"]
    resp = await client.get(f"/v1/projects/{wk}/settings", headers={"Origin": "https://shop.example"})
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == "https://shop.example"
    assert "X-RateLimit-Limit" in resp.headers
    host = f"{client.server.host}:{client.server.port}"
    assert (await resp.json())["integrations"] == {
        "Segment.io": {"apiKey": wk, "apiHost": f"{host}/v1", "protocol": "http"}}
    assert (await resp.json())["metrics"] == {"sampleRate": 0}  # no usage counters sent to Segment
    unknown = await client.get(f"/v1/projects/x{wk}/settings")
    assert unknown.status == 401 and (await unknown.json())["code"] == "unauthorized"
    other = await create_source(client, key)  # paused before its key is ever looked up (and cached)
    assert (await client.post(f"/v1/data-sources/{other['id']}/pause", headers=bearer(key))).status == 200
    paused = await client.get(f"/v1/projects/{other['write_key']}/settings")
    assert paused.status == 403 and (await paused.json())["code"] == "source_paused"
