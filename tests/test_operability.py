"""/metrics, /healthz, /readyz, and logs that never carry a key."""

import logging

from tests.conftest import bearer


async def test_health_and_readiness(client):
    assert await (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["database"] == "ok"


async def test_metrics_report_requests_batches_and_rejections(client, make_key):
    key = await make_key("write")
    await client.post("/v1/events/batch", headers=bearer(key),
                      json={"events": [{"event": "a", "user_id": "u"}, {"event": "Bad"}]})
    resp = await client.get("/metrics")
    assert resp.status == 200 and resp.content_type == "text/plain"
    text = await resp.text()
    assert 'tally_http_requests_total{method="POST",route="/v1/events/batch",status="200"}' in text
    assert 'tally_batch_events_count{actor="workspace"}' in text
    assert 'tally_flush_seconds_bucket{actor="workspace"' in text
    assert 'tally_ingest_seconds_count{actor="workspace"}' in text
    assert 'tally_events_rejected_total{reason="invalid"}' in text
    assert 'tally_mailbox_events{actor="workspace"}' in text


async def test_no_key_reaches_a_log_line(client, make_key, caplog):
    key = await make_key("read,write")
    with caplog.at_level(logging.DEBUG):
        await client.post("/v1/events", headers=bearer(key), json={"event": "e", "user_id": "u"})
        await client.get("/v1/events", headers=bearer(key))
        await client.get("/v1/events", headers=bearer(key[:-4] + "AAAA"))
    assert caplog.records, "requests should have been logged"
    secret = key.split("_sk_")[1]
    assert all(secret not in record.getMessage() and secret[:-4] not in str(record.__dict__)
               for record in caplog.records)


async def test_json_responses_carry_nosniff(client, make_key):
    key = await make_key("read")
    responses = [
        await client.get("/healthz"),
        await client.get("/v1/events", headers=bearer(key)),
        await client.get("/v1/events"),  # a keyed error
        await client.get("/api/sites"),  # a site error
        await client.post("/api/service/event", data=b"{nope"),
        await client.get("/no/such/route"),
    ]
    for resp in responses:
        assert resp.content_type == "application/json", resp.url
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", resp.url
