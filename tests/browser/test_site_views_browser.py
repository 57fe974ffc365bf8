"""Edges of the dashboard's site views in a real headless Chromium: event names at the spec's 64 characters
in the event log and the realtime feed, a workspace with more sites than GET /api/sites lists at once, and a
site page for a site that does not exist (or is another workspace's), and slow answers left behind by a
newer choice (the event log's page, realtime's window), which are not drawn over it."""

from __future__ import annotations

import re
import secrets

from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveServer, wait_for
from tests.browser.held_requests import answer_late, held_request, wait_held
from tests.browser.test_dashboard_browser import DASH, add_site, sign_in

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


def test_sites_past_the_first_50_are_counted_and_reachable(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account)
    token = secrets.token_hex(3)
    domains = [f"s{i}-{token}.example.com" for i in range(53)]  # s0 oldest
    for domain in domains:
        assert page.request.post(f"{live_server.base_url}/api/sites", form={"domain": domain}).ok
    page.goto(f"{live_server.base_url}/app")
    cards = page.locator("li.site")
    expect(cards).to_have_count(50)
    expect(page.locator(".sites-count")).to_have_text(f"Sites 1{DASH}50 of 53, newest first")
    expect(cards.first).to_contain_text(domains[-1])
    expect(page.locator(".pager button", has_text="Newer")).to_be_disabled()

    page.locator(".pager button", has_text="Older").click()
    expect(page).to_have_url(re.compile(r"/app\?offset=50$"))
    expect(cards).to_have_count(3)
    expect(page.locator(".sites-count")).to_have_text(f"Sites 51{DASH}53 of 53, newest first")
    expect(cards.locator(".site-domain")).to_have_text([domains[2], domains[1], domains[0]])
    expect(page.locator(".pager button", has_text="Older")).to_be_disabled()
    page.reload()  # the page is in the URL
    expect(cards).to_have_count(3)

    # The oldest site opens like any other, its domain in the header.
    oldest = cards.filter(has_text=domains[0])
    oldest.locator("a.site-domain").click()
    expect(page.locator(".page-head h1")).to_have_text(domains[0])
    expect(page.locator(".page-head .badge")).to_have_text("pending verification")
    expect(page.locator("select.range")).to_be_visible()
    page.go_back()
    expect(page).to_have_url(re.compile(r"/app\?offset=50$"))
    expect(cards).to_have_count(3)
    page.go_back()
    expect(cards).to_have_count(50)


def test_a_site_that_does_not_exist_offers_nothing(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account)
    # Another workspace's site: in development an unknown id sent an event becomes a site of the workspace
    # `default`; the dashboard treats it as the same 404 as a site of no workspace.
    foreign_site = f"auto-{secrets.token_hex(4)}"
    resp = page.request.post(f"{live_server.base_url}/api/service/event",
                             data={"s": foreign_site, "n": "pageview", "p": "/"})
    assert resp.status == 202
    assert page.request.get(f"{live_server.base_url}/api/verify?site={foreign_site}").status == 404
    reads: list[str] = []
    page.on("request", lambda r: "/api/analytics/" in r.url and reads.append(r.url))
    for site in ("nosuchsite", foreign_site):
        for tail in ("", "/realtime", "/events"):
            page.goto(f"{live_server.base_url}/app/sites/{site}{tail}?range=24h")
            expect(page.locator(".empty")).to_contain_text("This site does not exist or belongs to another workspace")
            expect(page.locator(".page-head h1")).to_have_text("Site not found")
            for control in ("select", "form", "input", "a:has-text('Export')", "nav.tabs"):
                expect(page.locator(f"#view {control}")).to_have_count(0)
    page.wait_for_timeout(500)
    assert reads == []


def test_dashboard_pages_load_without_console_errors(page: Page, live_server: LiveServer, account):
    # Chromium asks every origin for /favicon.ico unless the page names an icon: its 404 was a console
    # error on every page of the dashboard.
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(f"{m.text} @ {page.url}"))
    page.goto(f"{live_server.base_url}/login")
    expect(page.locator("form")).to_be_visible()
    sign_in(page, live_server, account)
    site_id = add_site(page, f"clean-{secrets.token_hex(4)}.example.com")
    for tail in ("", "/realtime", "/events"):
        page.goto(f"{live_server.base_url}/app/sites/{site_id}{tail}?range=24h")
        page.wait_for_load_state("networkidle")
    assert errors == []


def site_with_pageviews(page: Page, live_server: LiveServer, account, name: str, paths: tuple[str, ...]) -> str:
    """Signed in on a desktop, a new site whose event log holds a pageview of each path (one visit): its id."""
    page.set_viewport_size(DESKTOP)
    sign_in(page, live_server, account)
    site_id = add_site(page, f"{name}-{secrets.token_hex(4)}.example.com")
    for path in paths:
        resp = page.request.post(f"{live_server.base_url}/api/service/event",
                                 data={"s": site_id, "n": "pageview", "p": path, "sid": "v1"})
        assert resp.status == 202
    events = f"{live_server.base_url}/api/analytics/events?siteId={site_id}&range=1h"
    wait_for(lambda: page.request.get(events).json()["total"] == len(paths), "the events")
    return site_id


def test_the_event_log_lists_what_the_overviews_filters_match(page: Page, live_server: LiveServer, account):
    """The overview's filters carried to the Events page narrow its rows and its export links, show as chips,
    and removing one lists every event again (the log listed every event under any filter)."""
    site_id = site_with_pageviews(page, live_server, account, "log", ("/pricing", "/blog/a", "/blog/b"))

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=1h&filter=page%3D%3D%2Fblog%2F*")
    rows = page.locator("table.log tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(".chips .chip")).to_have_count(1)
    expect(page.locator(".pager")).to_contain_text("1\u20132 of 2")
    assert "filter=page%3D%3D%2Fblog%2F*" in page.get_by_role("link", name="Export CSV").get_attribute("href")
    page.locator(".chips .chip button").click()
    expect(rows).to_have_count(3)
    expect(page.locator(".chips .chip")).to_have_count(0)
    assert "filter=" not in page.url


def test_realtime_rates_of_a_quiet_site_are_not_zero(page: Page, live_server: LiveServer, account):
    """One pageview in the last 30 minutes is 0.03 a minute (the API's two decimals): shown rounded to one
    decimal it read 0 pageviews a minute beside that pageview in the feed and one current visitor."""
    sign_in(page, live_server, account)
    site_id = add_site(page, f"quiet-{secrets.token_hex(4)}.example.com")
    resp = page.request.post(f"{live_server.base_url}/api/service/event",
                             data={"s": site_id, "n": "pageview", "p": "/"})
    assert resp.status == 202
    realtime = f"{live_server.base_url}/api/analytics/realtime?siteId={site_id}&window=1800"
    wait_for(lambda: page.request.get(realtime).json()["pageviewsPerMinute"] == 0.03, "the pageview in realtime")

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime?window=1800")
    expect(page.locator(".feed li")).to_have_count(1)
    expect(page.locator("[data-stat=activeVisitors] .stat-value")).to_have_text("1")
    expect(page.locator("[data-stat=pageviewsPerMinute] .stat-value")).to_have_text("0.03")
    expect(page.locator("[data-stat=eventsPerMinute] .stat-value")).to_have_text("0.03")


def test_a_slow_page_of_the_event_log_left_behind_is_not_drawn_over_the_next(page: Page,
                                                                            live_server: LiveServer, account):
    site_id = site_with_pageviews(page, live_server, account, "pages", ("/one", "/two", "/three"))

    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=1h&limit=1")
    expect(page.locator(".pager")).to_contain_text("1\u20131 of 3")
    held = held_request(page, "**/api/analytics/events?*offset=1*")
    page.locator(".pager button", has_text="Older").click()  # page 2: held
    second = wait_held(page, held)
    page.locator(".pager button", has_text="Older").click()  # page 3, from the same pager: answered
    expect(page.locator(".pager")).to_contain_text("3\u20133 of 3")
    rows = page.locator("table.log tbody tr")
    expect(rows).to_have_text([re.compile("/one")])  # newest first: the third page holds the first event
    answer_late(page, second, "**/api/analytics/events?*offset=1*")
    # Before, page 2's row was drawn under page 3's pager (its pager said 3 of 3 beside /two).
    expect(rows).to_have_text([re.compile("/one")])
    expect(page.locator(".pager")).to_contain_text("3\u20133 of 3")
    assert "offset=2" in page.url


def test_a_slow_realtime_poll_of_the_window_left_behind_is_not_drawn(page: Page, live_server: LiveServer,
                                                                      account):
    sign_in(page, live_server, account)
    site_id = add_site(page, f"window-{secrets.token_hex(4)}.example.com")
    resp = page.request.post(f"{live_server.base_url}/api/service/event",
                             data={"s": site_id, "n": "pageview", "p": "/"})
    assert resp.status == 202
    held = held_request(page, "**/api/analytics/realtime?*window=60")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    first = wait_held(page, held)
    page.get_by_label("Realtime window").select_option("300")
    expect(page.locator("[data-stat=activeVisitors] .stat-value")).to_have_text("1")
    stale = {"activeVisitors": 99, "pageviewsPerMinute": 99, "eventsPerMinute": 99, "topActivePages": [],
             "recentEvents": []}
    answer_late(page, first, "**/api/analytics/realtime?*window=60", stale)
    # Read once, not awaited: the next poll (every 3 s) draws the right figure again whatever came before.
    assert page.locator("[data-stat=activeVisitors] .stat-value").inner_text() == "1"
