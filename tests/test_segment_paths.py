"""Paths Segment's other server SDKs post to: analytics-ruby sends its batches to /v1/import and
analytics-java to /v1/import/ (Segment's import endpoint, the batch call under its older name)."""

from __future__ import annotations

import pytest

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
