"""One set of input rules (app/input_rules.py) on /v1, /api and Segment's calls: what PostgreSQL cannot
store is refused in each API's shape, what it can store is stored, and ids in paths never reach SQL
unchecked."""

import orjson
import pytest

from tests.conftest import bearer
from tests.site_helpers import post_event, stored_events


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/users/a%00b"), ("DELETE", "/v1/users/a%00b"), ("GET", "/v1/reports/a%00b"),
    ("GET", "/v1/data-sources/a%00b"), ("POST", "/v1/data-sources/a%00b/sync"), ("GET", "/v1/dashboards/a%00b"),
])
async def test_a_keyed_path_id_postgresql_cannot_hold_is_404(client, make_key, method, path):
    resp = await client.request(method, path, headers=bearer(await make_key("read,write,admin")))
    assert resp.status == 404, await resp.text()
    assert (await resp.json())["error"]["code"] == "not_found"


async def test_a_site_path_id_postgresql_cannot_hold_is_404(client, login):
    await login()
    for method, path in [("DELETE", "/api/keys/a%00b"), ("GET", "/api/sites/a%00b/goals"),
                         ("DELETE", "/api/sites/x/goals/a%00b")]:
        resp = await client.request(method, path)
        assert resp.status == 404, (path, await resp.text())
        assert (await resp.json())["error"] in ("not found", "goal not found")


async def test_integers_beyond_64_bits_are_stored_on_both_apis(client, make_key, database_url):
    huge = 10**30
    site = "input-rules-huge"  # development: an unknown site id registers itself
    resp = await post_event(client, f'{{"s": "{site}", "n": "pageview", "props": {{"big": {huge}, "neg": {-huge}}}}}')
    assert resp.status == 202, await resp.text()
    [stored] = await stored_events(database_url, site)
    assert stored["properties"] == {"big": huge, "neg": -huge}
    key = bearer(await make_key("read,write"))
    resp = await client.post("/v1/events", headers=key,
                             json={"event": "e", "user_id": "u", "properties": {"big": huge}})
    assert resp.status == 200


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_nesting_past_64_levels_is_refused_alike_on_both_apis(client, make_key):
    key = {**bearer(await make_key("write")), "Content-Type": "application/json"}
    for depth, keyed_status, site_status in ((64, 200, 202), (65, 400, 400), (300, 400, 400)):
        keyed = await client.post("/v1/events", headers=key, data=(
            '{"event": "e", "user_id": "u", "properties": {"a": ' + _nested(depth - 1) + "}}").encode())
        assert keyed.status == keyed_status, (depth, await keyed.text())
        site = await post_event(client, ('{"s": "input-rules-depth", "n": "a", "props": ' + _nested(depth) + "}"))
        assert site.status == site_status, (depth, await site.text())
        if depth > 64:
            assert (await keyed.json())["error"]["fields"] == [
                {"field": "properties", "message": "nests deeper than 64 levels"}]
            assert (await site.json())["issues"] == [{"field": "props", "message": "nests deeper than 64 levels"}]


async def test_nul_is_refused_alike_on_both_apis(client, make_key):
    keyed = await client.post("/v1/events", headers=bearer(await make_key("write")),
                              json={"event": "e", "user_id": "u", "properties": {"a": "x\x00y"}})
    assert keyed.status == 400
    assert (await keyed.json())["error"]["fields"] == [{"field": "properties.a", "message": "contains U+0000"}]
    site = await post_event(client, orjson.dumps({"s": "input-rules-nul", "n": "a", "props": {"a": "x\x00y"}}))
    assert site.status == 400
    assert (await site.json())["issues"] == [{"field": "props", "message": "must not contain NUL characters"}]


@pytest.mark.parametrize(("path", "field"), [
    ("/v1/events?user_id=%00", "user_id"), ("/v1/events?event=a%00", "event"),
    ("/v1/users?trait%5Bplan%5D=%00", "trait[plan]"), ("/v1/users?trait%5B%00%5D=x", "trait[\\u0000]"),
    ("/v1/users?trait%5Bplan%5D=pro&trait%5Ba%00b%5D=x", "trait[a\\u0000b]"),
])
async def test_nul_in_a_keyed_query_filter_is_400(client, make_key, path, field):
    resp = await client.get(path, headers=bearer(await make_key("read")))
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"] == [{"field": field, "message": "contains U+0000"}]
    assert "X-RateLimit-Remaining" in resp.headers
