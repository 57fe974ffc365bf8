"""The dashboard with its server out of reach, in a real headless Chromium: every read and every action
whose request gets no answer (Playwright aborts it, as a stopped server or a lost network does) says so in
words a site owner understands, never the browser's "Failed to fetch"; a proxy's own error page for a
stopped server (502) reads the same; realtime keeps retrying and is live again once the server answers; the
overview and its panels try again after no answer or a 503."""

from __future__ import annotations

import json
import re
import secrets

from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import LiveServer
from tests.browser.held_requests import held_request, settle, wait_held
from tests.browser.test_dashboard_browser import add_site, sign_in
from tests.browser.test_panels_browser import panel

UNREACHABLE = "Can't reach the Tally server. Check your connection and try again."
API = "**/api/**"


def server_down(page: Page) -> None:
    """Every API request fails without an answer, as it does with the server stopped."""
    page.route(API, lambda route: route.abort())


def server_up(page: Page) -> None:
    page.unroute(API)


def no_raw_error(page: Page) -> None:
    text = page.locator("body").inner_text()
    assert "Failed to fetch" not in text and "TypeError" not in text, text


def test_a_stopped_server_is_named_as_such(page: Page, live_server: LiveServer, account):
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"down-{secrets.token_hex(4)}.example.com")
    page.request.post(f"{base}/api/service/event", data={"s": site_id, "n": "pageview", "p": "/", "sid": "v1"})

    # Adding a site, and checking its DNS record.
    page.reload()  # the new site's set-up is closed
    expect(page.locator("li.site")).to_have_count(1)
    server_down(page)
    page.fill("input[name=domain]", "another.example.com")
    page.click("form.add-site button")
    expect(page.locator("form.add-site + [role=alert]")).to_have_text(f"Could not add the site: {UNREACHABLE}")
    page.locator("li.site", has_text="down-").locator("button", has_text="Set up & verify").click()
    expect(page.locator(".verify [role=alert]")).to_have_text(UNREACHABLE)
    no_raw_error(page)

    # The site list, and a site's pages, opened while the server is down.
    page.reload()
    expect(page.locator("ul.cards [role=alert]")).to_have_text(UNREACHABLE)
    for view in ("", "/realtime", "/events"):
        page.goto(f"{base}/app/sites/{site_id}{view}")
        expect(page.locator("#view [role=alert]")).to_have_text(UNREACHABLE)
        no_raw_error(page)

    # The overview's figures and a panel's tab, once the page is open.
    server_up(page)
    page.goto(f"{base}/app/sites/{site_id}?range=24h")
    expect(panel(page, "pages").locator("button.toprow")).to_have_count(1)
    server_down(page)
    panel(page, "pages").locator("[data-tab=entry_page]").click()
    expect(panel(page, "pages").locator("[role=alert]")).to_have_text(UNREACHABLE)
    page.locator("select.range").select_option("7d")
    expect(page.locator(".overview > [role=alert]")).to_have_text(UNREACHABLE)
    expect(page.locator(".overview > p.muted")).to_have_text("Trying again every 5s.")
    no_raw_error(page)
    # Left open, the overview loads again by itself once the server answers.
    server_up(page)
    expect(page.locator(".stats")).to_be_visible(timeout=15000)
    expect(page.locator(".overview > [role=alert]")).to_have_count(0)
    server_down(page)
    page.locator("select.range").select_option("24h")
    expect(page.locator(".overview > [role=alert]")).to_have_text(UNREACHABLE)

    # A proxy in front of the stopped server answers 502 with a page of its own: the same words, not its HTML.
    server_up(page)

    def bad_gateway(route: Route) -> None:
        route.fulfill(status=502, content_type="text/html", body="<html><body><h1>502 Bad Gateway</h1></body></html>")

    page.route(API, bad_gateway)
    page.locator("select.range").select_option("30d")
    expect(page.locator(".overview > [role=alert]")).to_have_text(UNREACHABLE)
    assert "Bad Gateway" not in page.locator("body").inner_text()
    server_up(page)

    # Realtime says it is not updating, keeps polling, and is live again once the server answers.
    page.goto(f"{base}/app/sites/{site_id}/realtime")
    status = page.locator(".controls [role=status]")
    expect(status).to_contain_text("Live")
    server_down(page)
    expect(page.locator(".realtime [role=alert]")).to_have_text(UNREACHABLE)
    expect(status).to_have_text(re.compile(r"^Not updating · retrying every \d+s$"))
    no_raw_error(page)
    server_up(page)
    expect(status).to_contain_text("Live", timeout=10000)
    expect(page.locator("[data-stat=activeVisitors]")).to_be_visible()

    # API keys: the list, and creating one.
    page.goto(f"{base}/app/keys")
    expect(page.locator("input[name=name]")).to_be_visible()
    server_down(page)
    page.fill("input[name=name]", "backend")
    page.click("form.key-form button[type=submit]")
    expect(page.locator("form.key-form + [role=alert]")).to_have_text(f"Could not create the key: {UNREACHABLE}")
    page.reload()
    expect(page.locator("#view [role=alert]:visible")).to_have_text(UNREACHABLE)
    no_raw_error(page)

    # Signing out, and signing in.
    page.click("#logout")
    expect(page.locator("#logout-error")).to_have_text(
        "Not signed out: can't reach the Tally server. Check your connection and try again."
    )
    server_up(page)
    page.click("#logout")
    expect(page).to_have_url(f"{base}/login")
    server_down(page)
    page.fill("#email", account[0])
    page.fill("#password", account[1])
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text(UNREACHABLE)


def test_a_public_dashboard_names_a_stopped_server(page: Page, live_server: LiveServer, account):
    base = live_server.base_url
    sign_in(page, live_server, account, "/app/keys")
    made = page.request.post(f"{base}/api/keys", data={"name": "share", "scopes": ["read", "write"]}).json()
    auth = {"Authorization": f"Bearer {made['key']}"}
    dashboard = page.request.post(
        f"{base}/v1/dashboards",
        headers=auth,
        data={"name": "Launch", "charts": [{"title": "Signups", "type": "bar", "event": "signup"}]},
    ).json()
    shared = page.request.post(f"{base}/v1/dashboards/{dashboard['id']}/share", headers=auth).json()
    page.route("**/public/dashboards/*/data*", lambda route: route.abort())
    page.goto(shared["public_url"])
    expect(page.locator("#status")).to_have_text(
        "Can't reach the Tally server. Check your connection; the dashboard tries again every minute."
    )
    no_raw_error(page)


def test_the_overview_left_open_tries_again_after_a_503(page: Page, live_server: LiveServer, account):
    """A 503 is temporary by its meaning (PostgreSQL away, or the analytics store still mirroring a backlog
    after an upgrade, with Retry-After): the overview shows the server's words and loads again by itself, as it
    does when the server is out of reach; it stayed on the error until the visitor reloaded."""
    behind = ("the analytics store is still mirroring events committed before this request (a backlog after an "
              "upgrade, a rebuild or an outage); retry shortly")
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"behind-{secrets.token_hex(4)}.example.com")

    def still_mirroring(route: Route) -> None:
        route.fulfill(status=503, content_type="application/json", headers={"Retry-After": "10"},
                      body=json.dumps({"error": behind}))

    page.route("**/api/analytics/overview*", still_mirroring)
    page.goto(f"{base}/app/sites/{site_id}?range=24h")
    expect(page.locator(".overview > [role=alert]")).to_have_text(f"Could not load: {behind}")
    expect(page.locator(".overview > p.muted")).to_have_text("Trying again every 5s.")
    page.unroute("**/api/analytics/overview*")
    expect(page.locator(".stats")).to_be_visible(timeout=15000)
    expect(page.locator(".overview > [role=alert]")).to_have_count(0)


def test_a_panel_tries_again_after_a_503_and_keeps_a_later_tabs_rows(page: Page, live_server: LiveServer,
                                                                     account):
    """A panel's read answered 503 (or nothing) shows the error and loads again by itself, as the overview does
    (it stayed on the error until the visitor reloaded); and a slow failure of a tab left behind does not
    replace the rows of the tab chosen since."""
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"panel-{secrets.token_hex(4)}.example.com")
    page.request.post(f"{base}/api/service/event", data={"s": site_id, "n": "pageview", "p": "/a", "sid": "v1"})
    page.goto(f"{base}/app/sites/{site_id}?range=24h")
    pages = panel(page, "pages")
    expect(pages.locator("button.toprow")).to_have_count(1)

    entry = "**/api/analytics/breakdown?*property=entry_page*"
    page.route(entry, lambda route: route.fulfill(status=503, content_type="application/json",
                                                  headers={"Retry-After": "10"},
                                                  body=json.dumps({"error": "the database is unreachable"})))
    pages.locator("[data-tab=entry_page]").click()
    expect(pages.locator("[role=alert]")).to_have_text("Could not load: the database is unreachable")
    expect(pages.locator(".panel-body > p.muted")).to_have_text("Trying again every 5s.")
    page.unroute(entry)
    expect(pages.locator("button.toprow")).to_have_count(1, timeout=15000)
    expect(pages.locator("[role=alert]")).to_have_count(0)

    # The exit pages' read is held; the top pages' answer comes first; then the held read fails.
    exits = "**/api/analytics/breakdown?*property=exit_page*"
    held = held_request(page, exits)
    pages.locator("[data-tab=exit_page]").click()
    left_behind = wait_held(page, held)
    pages.locator("[data-tab=page]").click()
    expect(pages.locator("[data-tab=page]")).to_have_attribute("aria-selected", "true")
    expect(pages.locator("button.toprow")).to_have_count(1)
    with page.expect_response(exits):
        left_behind.fulfill(status=500, content_type="application/json", body=json.dumps({"error": "boom"}))
    settle(page)
    expect(pages.locator("[role=alert]")).to_have_count(0)
    expect(pages.locator("button.toprow")).to_have_count(1)
