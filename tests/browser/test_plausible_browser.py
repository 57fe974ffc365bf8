"""The real `plausible-tracker` npm package (unchanged, pinned in tests/browser/plausible/package-lock.json and
bundled here by esbuild) in headless Chromium, pointed at Tally with `apiHost`.

The customer page is served by a second server on its own port, so the tracker posts cross-origin to
Tally's /api/event as it would in production. It sends a pageview, a custom event with props, an SPA
navigation and an outbound link click; the events are read back through the event log and the stored
rows, visit dimensions included.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from app.appkeys import POOL
from tests.browser.conftest import DESKTOP_UA, LiveServer, customer_site, npm_bundle, wait_for

PROJECT = Path(__file__).parent / "plausible"
ENTRY = 'import Plausible from "plausible-tracker"; window.Plausible = Plausible\n'




@pytest.fixture(scope="module")
def browser_context_args() -> dict:
    # No CDN header here: a page's own cross-origin request carrying one would need a CORS preflight that
    # a real visitor's browser (whose CDN adds the header on the way) never makes.
    return {"user_agent": DESKTOP_UA, "viewport": {"width": 1280, "height": 860}}


@pytest.fixture(scope="module")
def tracker_bundle() -> str:
    """plausible-tracker as one script defining window.Plausible, built from the lockfile's version."""
    return npm_bundle(PROJECT, "plausible-tracker", ENTRY)


def customer_page(domain: str, api_host: str, outbound: str) -> str:
    config = json.dumps({"domain": domain, "apiHost": api_host, "trackLocalhost": True})
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Launch</title><script src="/plausible.js"></script></head><body>
<h1>Launch</h1>
<button id="signup" type="button">Sign up</button>
<button id="to-pricing" type="button">Pricing</button>
<a id="partner" href="{outbound}">Partner site</a>
<script>
  const plausible = Plausible({config})
  plausible.enableAutoPageviews()
  plausible.enableAutoOutboundTracking()
  document.getElementById('signup').addEventListener('click', () =>
    plausible.trackEvent('Signup', {{ props: {{ plan: 'pro', seats: 3 }} }}))
  document.getElementById('to-pricing').addEventListener('click', () => history.pushState({{}}, '', '/pricing'))
</script>
</body></html>"""


@contextlib.contextmanager
def plausible_site(live_server: LiveServer, bundle: str) -> Iterator[dict]:
    """A customer website (customer_site) serving a bundled Plausible tracker at /plausible.js, with a partner
    page at /partner for its outbound link."""
    partner = "<!doctype html><title>Partner</title><h1>Partner</h1>"
    with customer_site(live_server, "/plausible.js", bundle, {"/partner": partner}) as site:
        yield site


def signed_in_with_site(page: Page, live_server: LiveServer, account, domain: str) -> str:
    """The browser signed in as `account`, with a new site for `domain`: its id."""
    api = live_server.base_url
    assert page.request.post(f"{api}/api/auth/login",
                             data={"email": account[0], "password": account[1]}).status == 200
    created = page.request.post(f"{api}/api/sites", form={"domain": domain})
    assert created.status == 200
    return created.json()["id"]


@pytest.fixture
def site_server(live_server: LiveServer, tracker_bundle: str) -> Iterator[dict]:
    with plausible_site(live_server, tracker_bundle) as site:
        yield site


def test_plausible_tracker_events_land_in_tally(page: Page, live_server: LiveServer, account, site_server):
    api = live_server.base_url
    domain = f"launch-{int(time.time() * 1000)}.example"
    site_id = signed_in_with_site(page, live_server, account, domain)
    # The outbound link points at another host name of the same loopback server.
    outbound = f"http://localhost:{site_server['port']}/partner"
    site_server["pages"]["html"] = customer_page(domain, api, outbound)
    log_url = f"{api}/api/analytics/events?siteId={site_id}&range=1h&limit=100"

    def logged(count: int) -> Callable[[], list | None]:
        def check() -> list | None:
            events = page.request.get(log_url).json()["events"]
            return events if len(events) >= count else None
        return check

    landing = f"{site_server['base']}/launch?utm_source=newsletter&utm_medium=email&utm_campaign=autumn"
    page.goto(landing, referer="https://www.google.com/")
    wait_for(logged(1), "the pageview")
    page.click("#signup")
    wait_for(logged(2), "the custom event")
    page.click("#to-pricing")
    wait_for(logged(3), "the SPA pageview")
    page.click("#partner")
    page.wait_for_url(outbound)
    events = wait_for(logged(4), "the outbound click")

    oldest_first = list(reversed(events))
    assert [(e["name"], e["path"], e["url"], e["props"]) for e in oldest_first] == [
        ("pageview", "/launch?utm_source=newsletter&utm_medium=email&utm_campaign=autumn", landing, None),
        ("Signup", "/launch?utm_source=newsletter&utm_medium=email&utm_campaign=autumn", landing,
         {"plan": "pro", "seats": 3}),
        ("pageview", "/pricing", f"{site_server['base']}/pricing", None),
        ("outbound", "/pricing", f"{site_server['base']}/pricing", {"url": outbound}),
    ]
    assert {e["referrer"] for e in events} == {"https://www.google.com/"}
    assert {e["viewportW"] for e in events} == {1280}
    assert {e["country"] for e in events} == {None}  # no CDN header, no GeoIP database
    assert len({e["sessionId"] for e in events}) == 1

    async def stored() -> list[dict]:
        async with live_server.app[POOL].acquire() as conn:
            rows = await conn.fetch(
                "SELECT name, browser, browser_version, os, os_version, device, utm_source, utm_medium, "
                "utm_campaign, utm_term, utm_content, source, channel FROM events WHERE site_id = $1 "
                "ORDER BY ts, id", site_id)
        return [dict(r) for r in rows]

    client = {"browser": "Chrome", "browser_version": "130", "os": "Linux", "os_version": None, "device": "Laptop"}
    # The visit arrived through the newsletter's tagged link: its later events (the SPA page has neither the
    # tags nor another referrer than Google's) count for that visit's source and channel too, as in Plausible.
    tagged = {"utm_source": "newsletter", "utm_medium": "email", "utm_campaign": "autumn", "utm_term": None,
              "utm_content": None, "source": "newsletter", "channel": "Email"}
    assert live_server.run(stored()) == [{"name": name, **client, **tagged}
                                         for name in ("pageview", "Signup", "pageview", "outbound")]
