"""What a browser walk-through of the dashboard found, as a Plausible user lives it: keyboard use (focus stays
where the user acted), Back and Forward through the views, the sign-in page when the server fails, the event
log past its end and the realtime page's window and layout."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.test_panels_browser import open_site, panel


def focused(page: Page) -> str:
    return page.evaluate("(() => { const a = document.activeElement; return a.tagName + ' ' + "
                         "(a.getAttribute('aria-label') || a.dataset.tab || a.dataset.key || a.textContent) })()")


def test_keyboard_focus_stays_on_the_control_used(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}")
    expect(panel(page, "sources").locator("button.toprow")).to_have_count(5)

    # A closed select changes with the arrow keys: each step reloads the view, and the select keeps focus.
    page.focus("select.range")
    page.keyboard.press("ArrowDown")
    expect(page).to_have_url(re.compile(r"range=30d"))
    expect(page.locator("select.range")).to_be_focused()
    page.keyboard.press("ArrowUp")
    expect(page).not_to_have_url(re.compile(r"range="))
    expect(page.locator("select.range")).to_be_focused()

    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    expect(page).to_have_url(re.compile(r"compare=previous_period"))
    expect(page.locator("input[name=compare]")).to_be_focused()

    pages = panel(page, "pages")
    pages.locator("[data-tab=entry_page]").focus()
    page.keyboard.press("Enter")
    expect(pages.locator("[data-tab=entry_page]")).to_have_class(re.compile(r"\bactive\b"))
    expect(pages.locator("[data-tab=entry_page]")).to_be_focused()

    # Enter on a row filters by it; the row (now the panel's only one) keeps focus.
    locations = panel(page, "locations")
    locations.locator("button.toprow[data-key=DE]").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".chips .chip")).to_have_count(1)
    expect(locations.locator("button.toprow")).to_have_count(1)
    expect(locations.locator("button.toprow[data-key=DE]")).to_be_focused()
    panel(page, "devices").locator("button.toprow[data-key=Chrome]").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".chips .chip")).to_have_count(2)

    # Removing a chip moves focus to the next one; removing the last to the filter form.
    page.locator(".chips .chip button").first.focus()
    page.keyboard.press("Enter")
    expect(page.locator(".chips .chip")).to_have_count(1)
    expect(page.locator(".chips .chip button")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".chips")).to_be_hidden()
    expect(page.locator(".filter-form input")).to_be_focused()
    page.keyboard.type("/pricing")
    page.keyboard.press("Enter")
    expect(page.locator(".chips .chip")).to_have_count(1)
    expect(page.locator(".filter-form input")).to_be_focused()

    # The event log's pager: Enter on "Older" keeps focus on it, and on the last page it goes to "Newer".
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?limit=5")
    older = page.locator(".pager button", has_text="Older")
    older.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"offset=5"))
    expect(older).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"offset=10"))
    expect(older).to_be_disabled()
    expect(page.locator(".pager button", has_text="Newer")).to_be_focused()


def test_back_and_forward_step_through_ranges_filters_and_pages(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    overview = f"{live_server.base_url}/app/sites/{site_id}"
    page.goto(overview)
    expect(panel(page, "locations").locator("button.toprow")).to_have_count(3)
    page.select_option("select.range", "30d")
    expect(page).to_have_url(f"{overview}?range=30d")
    panel(page, "locations").locator("button.toprow[data-key=DE]").click()
    expect(page).to_have_url(f"{overview}?range=30d&filter=country%3D%3DDE")
    expect(panel(page, "locations").locator("button.toprow")).to_have_count(1)

    # Back undoes the filter, then the range, as in Plausible; Forward brings them back.
    page.go_back()
    expect(page).to_have_url(f"{overview}?range=30d")
    expect(page.locator(".chips")).to_be_hidden()
    expect(panel(page, "locations").locator("button.toprow")).to_have_count(3)
    expect(page.locator("select.range")).to_have_value("30d")
    page.go_back()
    expect(page).to_have_url(overview)
    expect(page.locator("select.range")).to_have_value("7d")
    page.go_forward()
    page.go_forward()
    expect(page).to_have_url(f"{overview}?range=30d&filter=country%3D%3DDE")
    expect(page.locator(".chips .chip .ellipsis")).to_have_text(["Country is Germany"])

    # The event log's pages too.
    page.goto(f"{overview}/events?limit=5")
    page.locator(".pager button", has_text="Older").click()
    expect(page).to_have_url(f"{overview}/events?limit=5&offset=5")
    expect(page.locator(".pager span")).to_have_text("6\u201310 of 14")
    page.go_back()
    expect(page).to_have_url(f"{overview}/events?limit=5")
    expect(page.locator(".pager span")).to_have_text("1\u20135 of 14")


def test_sign_in_tells_a_server_failure_from_a_wrong_password(page: Page, live_server, account):
    page.goto(f"{live_server.base_url}/login")
    page.fill("#email", account[0])
    page.fill("#password", account[1])
    # What the server answers while PostgreSQL is down (the outage policy's 503), here for this one request.
    page.route("**/api/auth/login", lambda route: route.fulfill(
        status=503, content_type="application/json", headers={"Retry-After": "5"},
        body='{"error": "service unavailable"}'))
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text(
        "The server could not sign you in (HTTP 503). Try again in a moment.")
    page.unroute("**/api/auth/login")
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server.base_url}/app")


def test_the_event_log_past_its_end_offers_the_last_page(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    events = f"{live_server.base_url}/app/sites/{site_id}/events"
    page.goto(f"{events}?limit=5&offset=500")
    # It read "501-500 of 14" over an empty table, and "Newer" went on to empty pages.
    expect(page.locator(".events")).to_have_text("No events past 14 in this range. Go to the last page")
    page.locator(".events button", has_text="Go to the last page").click()
    expect(page).to_have_url(f"{events}?limit=5&offset=10")
    expect(page.locator("table.log tbody tr")).to_have_count(4)
    expect(page.locator(".pager span")).to_have_text("11\u201314 of 14")
    page.go_back()
    expect(page).to_have_url(f"{events}?limit=5&offset=500")


def test_realtime_takes_only_its_windows(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime?window=abc")
    # It asked for window=abc, showed "Could not load: invalid window", and the picker claimed "Last minute".
    expect(page.locator(".realtime .stats")).to_be_visible()
    expect(page.locator("[role=alert]")).to_have_count(0)
    expect(page.locator("select[aria-label='Realtime window']")).to_have_value("60")


def test_realtime_cards_line_up(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    expect(page.locator(".realtime .grid2 > .card")).to_have_count(2)
    # "Active pages" and "Latest events" side by side start on one line (the second sat 16 px lower).
    tops = page.eval_on_selector_all(".realtime .grid2 > .card", "els => els.map(e => e.getBoundingClientRect().top)")
    assert len(tops) == 2 and tops[0] == tops[1], tops


def test_realtime_stops_saying_live_while_the_server_fails(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    status = page.locator(".controls [role=status]")
    expect(status).to_have_text(re.compile(r"^Live · updated"))
    page.route("**/api/analytics/realtime*", lambda route: route.fulfill(
        status=503, content_type="application/json", body='{"error": "service unavailable"}'))
    expect(page.locator(".realtime [role=alert]")).to_have_text("Could not load: service unavailable")
    expect(status).to_have_text("Not updating · retrying every 3s")
    page.unroute("**/api/analytics/realtime*")
    expect(status).to_have_text(re.compile(r"^Live · updated"))
    expect(page.locator(".realtime [role=alert]")).to_have_count(0)


def test_realtime_offers_the_tracker_only_to_a_site_without_events(page: Page, live_server, account):
    """A quiet window on a site that has events is not a site without the tracker: realtime says the window is
    empty instead of showing the install snippet (it did for a site with events earlier in the day)."""
    site_id = open_site(page, live_server, account)  # events of the last hours, none through realtime
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/realtime")
    expect(page.locator(".realtime")).to_contain_text("No events in this window.")
    expect(page.get_by_role("heading", name="No events yet")).to_have_count(0)
