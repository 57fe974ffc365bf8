"""End to end: events posted to the ingestion endpoint show up in the analytics reads (the outbox trigger
runs inside the site actor's COPY transaction; every read first brings the analytics store up to date)."""

from __future__ import annotations

import asyncio

from app.appkeys import ANALYTICS
from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import REFERRER_HOST, SITE_FROM_INPUT
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


OLD_REFERRER_HOST = (r"replaceRegexpOne(lower(referrer), "
                     r"'(?s)^(?:.*?://)?(?:[^/?#]*@)?(?:www\.)?([^/?#:]*).*$', '\1')")


async def test_a_referrer_that_is_not_a_url_is_no_top_referrer_in_a_store_from_before(
        client, database_url, workspace, login):
    """A server-side sender's `r: "not a url"` has no referrer host (Plausible's rule), also in a store whose
    view still derived the host from any text: opening it replaces the view's query in place."""
    db = client.app[ANALYTICS]
    view = f"{db.database}.site_events_in_mv"
    query = SITE_FROM_INPUT.format(source=f"{db.database}.events_in")
    await db.command(f"ALTER TABLE {view} MODIFY QUERY " + query.replace(REFERRER_HOST, OLD_REFERRER_HOST))
    await asyncio.to_thread(ensure_schema, db)

    await login()
    site_id, domain = await register_site(database_url, workspace)
    for referrer in ("not a url", "news.example/no-scheme", "https://news.example/a"):
        resp = await post_event(client, {"s": site_id, "n": "pageview", "p": "/", "r": referrer},
                                {"Origin": f"https://{domain}"})
        assert resp.status == 202, await resp.text()
    resp = await client.get("/api/analytics/top-referrers", params={"siteId": site_id})
    assert await resp.json() == {"data": [{"key": "news.example", "count": 1, "percentage": 100.0}], "total": 1}
