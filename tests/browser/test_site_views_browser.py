"""Edges of the dashboard's site views in a real headless Chromium: event names at the spec's 64 characters
in the event log and the realtime feed."""

from __future__ import annotations

import secrets

from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveServer, wait_for
from tests.browser.test_dashboard_browser import add_site, sign_in

DESKTOP = {"width": 1366, "height": 800}
LONG_NAMES = ("a" * 64, "\U0001f600" * 64)


def cut_and_inside(page: Page, badge_selector: str) -> list[dict]:
    """Per badge: whether its text is cut (wider than shown) and whether it stays inside its cell."""
    return page.eval_on_selector_all(badge_selector, """els => els.map(b => {
        const cell = b.parentElement.getBoundingClientRect(), box = b.getBoundingClientRect()
        return {name: b.textContent, title: b.title, cut: b.scrollWidth > b.clientWidth,
                inside: box.left >= cell.left - 0.5 && box.right <= cell.right + 0.5}
    })""")


def test_long_event_names_are_cut_like_paths(page: Page, live_server: LiveServer, account):
    page.set_viewport_size(DESKTOP)
    sign_in(page, live_server, account)
    site_id = add_site(page, f"names-{secrets.token_hex(4)}.example.com")
    for name in LONG_NAMES:
        resp = page.request.post(f"{live_server.base_url}/api/service/event",
                                 data={"s": site_id, "n": name, "p": "/len64", "sid": "v1"})
        assert resp.status == 202
    events = f"{live_server.base_url}/api/analytics/events?siteId={site_id}&range=1h"
    wait_for(lambda: page.request.get(events).json()["total"] == 2, "the two events")

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=1h")
    expect(page.locator("table.log tbody tr")).to_have_count(2)
    badges = cut_and_inside(page, "table.log tbody td .badge")
    assert sorted(b["name"] for b in badges) == sorted(LONG_NAMES)
    # Cut with an ellipsis inside the Event column (not drawn over the path), the whole name in the title.
    assert all(b["cut"] and b["inside"] and b["title"] == b["name"] for b in badges), badges
    expect(page.locator("table.log tbody tr").first.locator("td").nth(2)).to_have_text("/len64")

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    expect(page.locator(".feed li")).to_have_count(2)
    badges = cut_and_inside(page, ".feed li .badge")
    assert all(b["cut"] and b["title"] == b["name"] for b in badges), badges
    # The path beside each name still shows.
    widths = page.eval_on_selector_all(".feed li .path", "els => els.map(e => e.getBoundingClientRect().width)")
    assert len(widths) == 2 and min(widths) > 40, widths
