"""End to end: events posted to the ingestion endpoint show up in the analytics reads (the outbox trigger
runs inside the site actor's COPY transaction; every read first brings the analytics store up to date)."""

from __future__ import annotations

from tests.site_helpers import post_event, register_site


async def test_ingested_events_reach_overview_top_lists_and_log(client, database_url, workspace, login):
    await login()
    site_id, domain = await register_site(database_url, workspace)
    origin = {"Origin": f"https://{domain}"}
    sent = [
        {"s": site_id, "n": "pageview", "p": "/", "r": "https://www.google.com/", "sid": "a"},
        {"s": site_id, "n": "pageview", "p": "/x?y=1", "r": f"https://{domain}/", "sid": "a"},
        {"s": site_id, "n": "pageview", "p": "/", "sid": "b"},
        {"s": site_id, "n": "signup", "p": "/x", "props": {"plan": "pro"}, "sid": "b"},
    ]
    for body in sent:
        resp = await post_event(client, body, origin)
        assert resp.status == 202, await resp.text()

    resp = await client.get("/api/analytics/overview", params={"siteId": site_id, "range": "24h"})
    body = await resp.json()
    assert (body["totalEvents"], body["totalPageviews"], body["uniqueVisitors"]) == (4, 3, 1)
    assert body["bounceRate"] == 50.0  # session a: two pageviews, b: one
    assert body["topPages"] == [{"key": "/", "count": 2, "percentage": 66.67},
                                {"key": "/x", "count": 1, "percentage": 33.33}]
    assert body["topReferrers"] == [{"key": "google.com", "count": 1, "percentage": 100.0}]
    assert sum(p["value"] for p in body["timeSeries"]) == 3

    resp = await client.get("/api/analytics/top-pages", params={"siteId": site_id, "eventName": "signup"})
    assert await resp.json() == {"data": [{"key": "/x", "count": 1, "percentage": 100.0}], "total": 1}
    log = await (await client.get("/api/analytics/events", params={"siteId": site_id})).json()
    assert log["total"] == 4 and log["events"][0]["name"] == "signup" and log["events"][0]["props"] == {"plan": "pro"}
