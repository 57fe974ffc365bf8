"""The tracker's click events in a real headless Chromium: a file download (data-downloads) and a tagged
element (data-tally-event with data-tally-prop-*), read back through the event log."""

from __future__ import annotations

import time

from playwright.sync_api import Page

from tests.browser.conftest import LiveServer, wait_for


def test_downloads_and_tagged_elements_send_their_events(page: Page, live_server: LiveServer, account):
    api = live_server.base_url
    assert page.request.post(f"{api}/api/auth/login",
                             data={"email": account[0], "password": account[1]}).status == 200
    created = page.request.post(f"{api}/api/sites", form={"domain": f"links-{int(time.time() * 1000)}.example"})
    site_id = created.json()["id"]
    page.goto(f"{api}/__site__/links?site={site_id}")
    page.wait_for_function("typeof window.tally === 'function'")
    with page.expect_download():
        page.click("#download")
    page.click("#page")  # a link to the page itself: no event
    page.click("#tagged b")  # inside the tagged button
    log = f"{api}/api/analytics/events?siteId={site_id}&range=1h&limit=100"
    events = wait_for(lambda: (e := page.request.get(log).json()["events"]) and len(e) >= 2 and e, "the two events")
    time.sleep(0.5)  # anything that should not have been stored had time to arrive
    events = page.request.get(log).json()["events"]
    assert sorted((e["name"], e["props"]) for e in events) == [
        ("Signup", {"plan": "pro"}),
        ("file_download", {"url": f"{api}/__site__/files/guide.pdf"}),
    ]
