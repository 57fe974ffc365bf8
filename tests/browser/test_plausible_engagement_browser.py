"""Plausible's current npm tracker, `@plausible-analytics/tracker` (unchanged, pinned in
tests/browser/plausible/package-lock.json, bundled by esbuild), in headless Chromium, with `endpoint` pointed at
Tally's /api/event from a page on another origin.

Besides pageviews and events, this tracker reports how far each page was scrolled and how long it was seen:
an `engagement` event before the next SPA pageview, and when the page is hidden or left. Tally stores them
and shows them as the pages' scroll depth and time on page, in the breakdown and on the dashboard's Top
pages, and counts them as no event.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import DESKTOP_UA, LiveServer, npm_bundle, wait_for
from tests.browser.test_plausible_browser import PROJECT, plausible_site, signed_in_with_site

ENTRY = 'import { init, track } from "@plausible-analytics/tracker"; window.PlausibleNpm = { init, track }\n'


@pytest.fixture(scope="module")
def browser_context_args() -> dict:
    return {"user_agent": DESKTOP_UA, "viewport": {"width": 1280, "height": 800}}


@pytest.fixture(scope="module")
def tracker_bundle() -> str:
    return npm_bundle(PROJECT, "@plausible-analytics/tracker", ENTRY)


def customer_page(domain: str, api: str, outbound: str) -> str:
    config = json.dumps({"domain": domain, "endpoint": f"{api}/api/event", "captureOnLocalhost": True,
                         "outboundLinks": True, "fileDownloads": True})
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Launch</title><script src="/plausible.js"></script></head><body>
<h1>Launch</h1>
<button id="buy" type="button">Buy</button>
<button id="to-pricing" type="button">Pricing</button>
<a id="report" href="/files/report.pdf" download>Report</a>
<a id="partner" href="{outbound}">Partner site</a>
<div style="height: 4000px">A long read</div>
<p id="end">The end</p>
<script>
  // The tracker sends nothing from an automated browser (navigator.webdriver) unless this is set, as
  // Plausible's own browser tests set it.
  window.__plausible = true
  PlausibleNpm.init({config})
  document.getElementById('buy').addEventListener('click', () =>
    PlausibleNpm.track('Purchase', {{ props: {{ plan: 'pro' }}, revenue: {{ amount: 15.99, currency: 'USD' }} }}))
  document.getElementById('to-pricing').addEventListener('click', () => history.pushState({{}}, '', '/pricing'))
</script>
</body></html>"""


@pytest.fixture
def site_server(live_server: LiveServer, tracker_bundle: str) -> Iterator[dict]:
    with plausible_site(live_server, tracker_bundle) as site:
        yield site


def test_the_current_plausible_tracker_with_scroll_depth_and_time_on_page(page: Page, live_server: LiveServer,
                                                                           account, site_server):
    api = live_server.base_url
    domain = f"engage-{int(time.time() * 1000)}.example"
    site_id = signed_in_with_site(page, live_server, account, domain)
    outbound = f"http://localhost:{site_server['port']}/partner"
    site_server["pages"]["html"] = customer_page(domain, api, outbound)
    log_url = f"{api}/api/analytics/events?siteId={site_id}&range=1h&limit=100"

    def logged(test: Callable[[list], bool]) -> Callable[[], list | None]:
        def check() -> list | None:
            events = list(reversed(page.request.get(log_url).json()["events"]))  # oldest first
            return events if test(events) else None
        return check

    def named(name: str) -> Callable[[list], bool]:
        return lambda events: any(e["name"] == name for e in events)

    page.goto(f"{site_server['base']}/launch", referer="https://www.google.com/")
    wait_for(logged(named("pageview")), "the pageview")
    page.click("#buy")
    wait_for(logged(named("Purchase")), "the custom event")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    expect(page.locator("#end")).to_be_in_viewport()
    page.wait_for_timeout(1200)  # seen for over a second before the next page
    page.click("#to-pricing")
    events = wait_for(logged(lambda es: [e["name"] for e in es].count("pageview") == 2), "the SPA pageview")
    page.click("#report")
    wait_for(logged(named("File Download")), "the download")
    page.click("#partner")
    page.wait_for_url(outbound)
    events = wait_for(logged(named("outbound")), "the outbound click")

    base = site_server["base"]
    assert [(e["name"], e["path"], e["props"]) for e in events if e["name"] != "engagement"] == [
        ("pageview", "/launch", None),
        ("Purchase", "/launch", {"plan": "pro", "$revenue_amount": "15.99", "$revenue_currency": "USD"}),
        ("pageview", "/pricing", None),
        ("File Download", "/pricing", {"url": f"{base}/files/report.pdf"}),
        ("outbound", "/pricing", {"url": outbound}),
    ]
    # The page left by the SPA navigation reported its scroll (to the bottom) and the time it was seen,
    # before the next page's pageview.
    names = [e["name"] for e in events]
    launch = events[names.index("engagement")]
    assert names.index("engagement") < len(names) - 1 - names[::-1].index("pageview")
    assert launch["path"] == "/launch" and launch["props"]["$scroll_depth"] == 100
    assert 1200 <= launch["props"]["$engagement_time"] < 60_000
    assert len({e["sessionId"] for e in events}) == 1

    def mirrored() -> dict | None:  # the analytics store has what the log has (its copy lags by up to ~1 s)
        body = page.request.get(f"{api}/api/analytics/overview?siteId={site_id}&range=24h").json()
        return body if body["totalEvents"] >= 5 else None

    overview = wait_for(mirrored, "the events in the analytics store")
    assert (overview["totalPageviews"], overview["totalEvents"]) == (2, 5)  # engagement events are none
    pages = page.request.get(f"{api}/api/analytics/breakdown?siteId={site_id}&range=24h&property=page"
                             "&metrics=visitors,scroll_depth,time_on_page").json()["data"]
    by_page = {r["key"]: r for r in pages}
    assert by_page["/launch"]["scroll_depth"] == 100
    assert 1 <= by_page["/launch"]["time_on_page"] < 60

    # The dashboard's Top pages: time on page and scroll depth beside the visitors.
    page.goto(f"{api}/app/sites/{site_id}")
    pages_panel = page.locator("[data-panel=pages]")
    expect(pages_panel.locator(".toprow.head")).to_have_text(re.compile("Visitors.*Time on page.*Scroll depth"))
    launch_row = pages_panel.locator("button.toprow", has_text="/launch")
    expect(launch_row.locator("[data-metric=scroll_depth]")).to_have_text("100%")
    expect(launch_row.locator("[data-metric=time_on_page]")).to_have_text(re.compile(r"^[1-5]?[0-9]s$"))
