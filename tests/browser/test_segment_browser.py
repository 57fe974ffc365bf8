"""Segment's analytics.js (the unchanged `@segment/analytics-next` npm package, pinned in
tests/browser/segment/package-lock.json and bundled here by esbuild) in headless Chromium, pointed at Tally
with `cdnURL` alone, as a Segment user moving to Tally would change it.

The customer page is served by a second server on its own port, so analytics.js loads its settings from
Tally and then posts cross-origin, with its write key in an Authorization header: every call is preflighted.
Both of its delivery modes are driven: one request per call (/v1/p, /v1/i, /v1/t) and batching (/v1/b).
The calls are read back through the keyed API.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import DESKTOP_UA, LiveServer, customer_site, npm_bundle, wait_for

PROJECT = Path(__file__).parent / "segment"
ENTRY = 'import { AnalyticsBrowser } from "@segment/analytics-next"; window.AnalyticsBrowser = AnalyticsBrowser\n'


@pytest.fixture(scope="module")
def browser_context_args() -> dict:
    return {"user_agent": DESKTOP_UA, "viewport": {"width": 1280, "height": 860}}


@pytest.fixture(scope="module")
def analytics_bundle() -> str:
    """analytics-next as one script defining window.AnalyticsBrowser, built from the lockfile's version."""
    return npm_bundle(PROJECT, "@segment/analytics-next", ENTRY)


def customer_page(write_key: str, cdn_url: str, user_id: str, batching: bool) -> str:
    options = {"integrations": {"Segment.io": {"deliveryStrategy": {
        "strategy": "batching", "config": {"size": 3, "timeout": 200}}}}} if batching else {}
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Shop</title><script src="/analytics.js"></script></head><body>
<h1>Shop</h1>
<script>
  const analytics = AnalyticsBrowser.load({json.dumps({"writeKey": write_key, "cdnURL": cdn_url})},
                                          {json.dumps(options)})
  analytics.page('Shop', {{ section: 'home' }})
  analytics.identify({json.dumps(user_id)}, {{ plan: 'pro' }})
  analytics.track('Order Completed', {{ revenue: 42, currency: 'EUR' }})
</script>
</body></html>"""


@pytest.fixture
def shop(live_server: LiveServer, analytics_bundle: str) -> Iterator[dict]:
    with customer_site(live_server, "/analytics.js", analytics_bundle) as site:
        yield site


@pytest.fixture
def tally_key(page: Page, live_server: LiveServer, account) -> str:
    """An admin+read key of the account's workspace, minted through the dashboard."""
    api = live_server.base_url
    assert page.request.post(f"{api}/api/auth/login",
                             data={"email": account[0], "password": account[1]}).status == 200
    made = page.request.post(f"{api}/api/keys", data={"name": "segment test", "scopes": ["read", "admin"]})
    assert made.status in (200, 201), made.text()
    return made.json()["key"]


@pytest.mark.parametrize("batching", [False, True], ids=["one-request-per-call", "batching"])
def test_analytics_js_calls_land_in_tally(page: Page, live_server: LiveServer, shop, tally_key: str,
                                          batching: bool):
    api, auth = live_server.base_url, {"Authorization": f"Bearer {tally_key}"}
    created = page.request.post(f"{api}/v1/data-sources", headers=auth,
                                data={"name": "web", "type": "segment", "credentials": {}})
    assert created.status == 201, created.text()
    write_key = created.json()["write_key"]
    user_id = f"shopper-{'b' if batching else 'c'}"
    shop["pages"]["html"] = customer_page(write_key, api, user_id, batching)
    posted: list[str] = []
    page.on("request", lambda r: r.method == "POST" and r.url.startswith(api) and posted.append(r.url[len(api):]))

    def stored() -> list | None:
        resp = page.request.get(f"{api}/v1/events?user_id={user_id}&limit=100", headers=auth)
        events = resp.json()["data"]
        return events if len(events) >= 2 else None

    page.goto(f"{shop['base']}/shop")
    events = wait_for(stored, "the page and track calls")
    assert sorted((e["event"], e["properties"].get("name"), e["properties"].get("revenue")) for e in events) == [
        ("order_completed", None, 42), ("page_viewed", "Shop", None)]

    def identified() -> dict | None:
        # The page and track calls make the profile too, and in one-request-per-call mode they may be
        # committed before the identify call that carries the traits.
        resp = page.request.get(f"{api}/v1/users/{user_id}", headers=auth)
        return resp.json() if resp.ok and "plan" in resp.json()["traits"] else None

    profile = wait_for(identified, "the identified profile")
    assert profile["traits"]["plan"] == "pro"
    # Each mode used its own paths, the per-call short forms or the batch path, and nothing was retried (a
    # response the page may not read is a failure to analytics.js).
    if batching:
        assert set(posted) == {"/v1/b"}
    else:
        assert sorted(posted) == ["/v1/i", "/v1/p", "/v1/t"]

