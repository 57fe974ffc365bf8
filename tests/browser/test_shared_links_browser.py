"""A site's shared link in a real headless Chromium: made from the site's overview, opened in a fresh
context (no sign-in), it shows the overview of the events the test sent, read-only; revoked, it is gone."""

from __future__ import annotations

import secrets
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import LiveServer, wait_for
from tests.browser.test_dashboard_browser import add_site, sign_in


def test_a_shared_link_shows_the_overview_without_signing_in(page: Page, browser: Browser, browser_context_args: dict,
                                                             live_server: LiveServer, account, screenshots: Path):
    base = live_server.base_url
    sign_in(page, live_server, account)
    domain = f"shared-{secrets.token_hex(4)}.example.com"
    site_id = add_site(page, domain)
    for name, path, sid in (("pageview", "/a", "v1"), ("pageview", "/b", "v1"), ("pageview", "/a", "v2"),
                            ("signup", "/b", "v1")):
        resp = page.request.post(f"{base}/api/service/event", data={"s": site_id, "n": name, "p": path, "sid": sid})
        assert resp.status == 202
    events = f"{base}/api/analytics/events?siteId={site_id}&range=1h"
    wait_for(lambda: page.request.get(events).json()["total"] == 4, "the four events")

    page.goto(f"{base}/app/sites/{site_id}")
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("3")
    page.click("details.shared-links summary")
    expect(page.locator(".shared-list")).to_contain_text("No shared links.")
    page.fill("input[name=link_name]", "For the board")
    page.click("details.shared-links button[type=submit]")
    link = page.locator("li.shared-link")
    expect(link).to_have_count(1)
    expect(link).to_contain_text("For the board")
    url = link.locator("code").text_content()
    assert url.startswith(f"{base}/share/"), url

    # A fresh context: no cookie, no session.
    context = browser.new_context(**browser_context_args)
    errors: list[str] = []
    try:
        shared = context.new_page()
        shared.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
        shared.on("console", lambda msg: msg.type == "error" and errors.append(f"console: {msg.text}"))
        shared.goto(url + "?range=24h")
        expect(shared.locator("h1")).to_have_text(domain)
        expect(shared.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("3")
        expect(shared.locator("[data-stat=totalEvents] .stat-value")).to_have_text("4")
        expect(shared.locator("[data-stat=uniqueVisitors] .stat-value")).not_to_have_text("0")
        expect(shared.locator("[data-panel=pages] .toprow[data-key='/a']")).to_be_visible()
        expect(shared.locator(".live")).to_contain_text("current visitor")
        # Read-only: no export, no goal management, no shared links, no way into the signed-in dashboard.
        expect(shared.locator("a[download]")).to_have_count(0)
        expect(shared.locator("text=Manage goals")).to_have_count(0)
        expect(shared.locator("details.shared-links")).to_have_count(0)
        expect(shared.locator("a[href^='/app']")).to_have_count(0)
        assert errors == []
        shared.screenshot(path=screenshots / "shared-link.png", full_page=True)
        page.screenshot(path=screenshots / "shared-links-control.png", full_page=True)

        # Revoked from the dashboard: the link's page is gone.
        link.get_by_role("button", name="Revoke For the board").click()
        expect(page.locator(".shared-list")).to_contain_text("No shared links.")
        expect(page.locator("input[name=link_name]")).to_be_focused()  # the button went with its link
        resp = shared.goto(url)
        assert resp is not None and resp.status == 404
        expect(shared.locator("h1")).to_have_text("Link not found")
    finally:
        context.close()


def unlock(shared: Page, *, wrong: str, right: str) -> None:
    """On a link's password form: a wrong password shows the form again, the right one the overview."""
    shared.fill("#password", wrong)
    shared.click("button[type=submit]")
    expect(shared.locator("[role=alert]")).to_have_text("Wrong password.")
    shared.fill("#password", right)
    shared.click("button[type=submit]")
    expect(shared.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("1")


def test_a_shared_link_with_a_password_asks_for_it(page: Page, browser: Browser, browser_context_args: dict,
                                                    live_server: LiveServer, account):
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"guarded-{secrets.token_hex(4)}.example.com")
    assert page.request.post(f"{base}/api/service/event", data={"s": site_id, "n": "pageview", "p": "/"}).status == 202
    page.goto(f"{base}/app/sites/{site_id}")
    # The overview drawn first: its stats and chart push the shared links down, and a click aimed before
    # they arrive can land beside the summary, leaving the section closed (failed once in CI).
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("1")
    page.click("details.shared-links summary")
    page.fill("input[name=link_name]", "Board")
    page.fill("input[name=link_password]", "correct horse 42")
    page.click("details.shared-links button[type=submit]")
    link = page.locator("li.shared-link")
    expect(link).to_contain_text("password")
    url = link.locator("code").text_content()

    context = browser.new_context(**browser_context_args)
    try:
        shared = context.new_page()
        shared.goto(url + "?range=24h")
        expect(shared.locator("[data-stat=totalPageviews]")).to_have_count(0)  # nothing before the password
        unlock(shared, wrong="wrong horse 42", right="correct horse 42")
        shared.reload()  # the access cookie keeps it open
        expect(shared.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("1")

        # A new password, set from the dashboard, ends the old one's access.
        link.get_by_role("button", name="Password of Board").click()
        link.get_by_label("New password for Board").fill("battery staple 7")
        link.get_by_role("button", name="Change password").click()
        expect(link.get_by_role("button", name="Remove password of Board")).to_be_hidden()  # redrawn, closed
        shared.reload()
        unlock(shared, wrong="correct horse 42", right="battery staple 7")

        # Removed: the link opens without one, in a fresh browser too.
        link.get_by_role("button", name="Password of Board").click()
        link.get_by_role("button", name="Remove password of Board").click()
        expect(link.locator(".badge")).to_have_count(0)
        fresh = browser.new_context(**browser_context_args)
        try:
            other = fresh.new_page()
            other.goto(url + "?range=24h")
            expect(other.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("1")
        finally:
            fresh.close()
    finally:
        context.close()
