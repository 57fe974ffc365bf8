"""A path in a right-to-left script keeps its segments in order on the dashboard (real headless Chromium): in
the left-to-right layout the slash between two Hebrew words took their direction, so `/שלום/עולם` showed as
`עולם/שלום/`, its segments swapped. The pages panel, the event log and realtime's pages show the first
segment left of the second, and their text is still the path."""

from __future__ import annotations

import secrets

from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveServer, wait_for
from tests.browser.test_dashboard_browser import add_site, sign_in
from tests.browser.test_panels_browser import panel

FIRST, SECOND = "שלום", "עולם"
PATH = f"/{FIRST}/{SECOND}"


def send_pageview(page: Page, server: LiveServer, site_id: str) -> None:
    resp = page.request.post(f"{server.base_url}/api/service/event",
                             data={"s": site_id, "n": "pageview", "p": PATH, "sid": "v1"})
    assert resp.status == 202
    events = f"{server.base_url}/api/analytics/events?siteId={site_id}&range=1h"
    wait_for(lambda: page.request.get(events).json()["total"] == 1, "the pageview")


def segments_in_order(page: Page, selector: str) -> dict:
    """Where each segment is drawn inside the first element matching `selector`, and that element's text."""
    return page.locator(selector).first.evaluate("""(el, words) => {
        const left = (word) => {
            const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT)
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                const at = node.data.indexOf(word)
                if (at < 0) continue
                const range = document.createRange()
                range.setStart(node, at)
                range.setEnd(node, at + word.length)
                return range.getBoundingClientRect().left
            }
            return null
        }
        return { first: left(words[0]), second: left(words[1]), text: el.textContent }
    }""", [FIRST, SECOND])


def expect_in_order(page: Page, selector: str) -> None:
    expect(page.locator(selector).first).to_have_text(PATH)
    drawn = segments_in_order(page, selector)
    assert drawn["text"] == PATH, drawn
    assert drawn["first"] is not None and drawn["second"] is not None, drawn
    assert drawn["first"] < drawn["second"], drawn


def test_a_hebrew_path_keeps_its_segments_in_order(page: Page, live_server, account):
    sign_in(page, live_server, account)
    site_id = add_site(page, f"rtl-{secrets.token_hex(4)}.example.com")
    send_pageview(page, live_server, site_id)

    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect(panel(page, "pages").locator("button.toprow .key")).to_have_text([PATH])
    expect_in_order(page, "[data-panel=pages] button.toprow .key")

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=24h")
    expect_in_order(page, "tr[data-event] td:nth-child(3)")

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    expect_in_order(page, ".toplist .key")
    expect_in_order(page, ".feed li .path")
