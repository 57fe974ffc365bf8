"""The dashboard and the tracker in a real headless Chromium against a live server.

One journey per test: sign in, add a site, browse a page of the site that embeds /tracker.js (load, SPA
navigation, custom event, outbound click, beforeSend hook), then read the events back through the API
and see them in the overview, realtime panel and event log; manage API keys; verify a domain.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser import site_pages
from tests.browser.conftest import LiveServer, wait_for

DASH = "\u2013"  # the pager's en dash
REFERRER = "https://news.example.org/story?id=1"
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def sign_in(page: Page, server: LiveServer, account: tuple[str, str], path: str = "/app") -> None:
    page.goto(server.base_url + path)
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#email", account[0])
    page.fill("#password", account[1])
    page.click("button[type=submit]")
    expect(page).to_have_url(server.base_url + path)


def add_site(page: Page, domain: str, typed: str | None = None) -> str:
    page.fill("input[name=domain]", typed or domain)
    page.click("form.add-site button")
    card = page.locator("li.site", has_text=domain)
    expect(card).to_be_visible()
    return card.get_attribute("data-site")




def no_horizontal_overflow(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_login_shows_errors_and_returns_to_the_requested_page(page: Page, live_server, account, screenshots: Path):
    page.goto(live_server.base_url + "/")
    expect(page).to_have_url(live_server.base_url + "/login")
    page.fill("#email", account[0])
    page.fill("#password", "wrong password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("Wrong email or password.")
    page.fill("#password", "")
    page.screenshot(path=screenshots / "login.png")
    sign_in(page, live_server, account, "/app/keys")
    expect(page.locator("h1")).to_have_text("API keys")
    expect(page.locator("#whoami")).to_have_text(account[0])
    # A sign-out the server fails (the database down: 503) leaves the session valid: the page says so and stays.
    page.route("**/api/auth/logout", lambda route: route.fulfill(status=503, body='{"error": "service unavailable"}'))
    page.click("#logout")
    expect(page.locator("#logout-error")).to_have_text("Not signed out: the server answered 503. Try again.")
    assert page.url.endswith("/app/keys")
    page.unroute("**/api/auth/logout")
    page.click("#logout")
    expect(page).to_have_url(live_server.base_url + "/login")
    page.goto(live_server.base_url + "/app")
    expect(page).to_have_url(re.compile(r"/login\?next=/app$"))


def browse_site(page: Page, server: LiveServer, site_id: str) -> dict:
    """Act as a visitor of the customer's site; returns what the checks below need."""
    shop = f"{server.base_url}/__site__/shop?site={site_id}"
    page.goto(shop, referer=REFERRER)
    page.wait_for_function("typeof window.tally === 'function' && !window.tally.q")
    page.click("#to-product")  # SPA navigation: history.pushState
    expect(page).to_have_url(re.compile(r"/__site__/shop/product\?id=7"))
    page.click("#signup")
    long_path = "/__site__/shop/" + "a-very-long-product-slug-" * 12
    page.evaluate("p => history.pushState({}, '', p)", long_path)
    page.evaluate("() => history.replaceState({}, '', location.pathname + location.search + '#reviews')")
    page.click("#outbound")
    expect(page).to_have_url(re.compile(r"^http://localhost:\d+/__site__/landing$"))
    page.goto(f"{server.base_url}/__site__/hooks?site={site_id}")
    page.wait_for_function("window.sent === true")
    return {"shop": shop, "long_path": long_path}


def read_events(page: Page, server: LiveServer, site_id: str, expected: int) -> list[dict]:
    url = f"{server.base_url}/api/analytics/events?siteId={site_id}&range=1h&limit=100"

    def fetch():
        data = page.request.get(url).json()
        return data["events"] if data["total"] >= expected else None

    wait_for(fetch, f"{expected} events")
    time.sleep(0.5)  # anything that should not have been stored had time to arrive
    data = page.request.get(url).json()
    assert data["total"] == expected, [e["name"] for e in data["events"]]
    return data["events"]


def check_events(events: list[dict], server: LiveServer, site_id: str, visit: dict) -> None:
    by_name: dict[str, list[dict]] = {}
    for e in sorted(events, key=lambda e: e["createdAt"]):
        by_name.setdefault(e["name"], []).append(e)
    assert sorted(by_name) == ["boom", "checkout", "identify", "outbound", "pageview", "signup"]

    first, product, long_page = by_name["pageview"]
    assert first["url"] == visit["shop"]
    assert first["path"] == f"/__site__/shop?site={site_id}"
    assert first["referrer"] == REFERRER
    assert first["title"] == "Shop home"
    assert first["viewportW"] == 1280
    assert first["props"] == {"app": "shop", "plan": "free"}  # the queued setDefaultProps applied
    assert re.fullmatch(r"[0-9a-f]{32}", first["sessionId"])
    assert first["country"] == "DE"
    assert first["id"].startswith("evt_")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["createdAt"])

    assert product["path"] == f"/__site__/shop/product?id=7&site={site_id}"
    assert product["title"] == "Product"
    # A later page of the app names the page before it as its referrer, not the landing's again.
    assert product["referrer"] == visit["shop"]
    assert long_page["path"] == visit["long_path"]  # the hash-only change sent nothing
    assert long_page["referrer"] == f"{server.base_url}/__site__/shop/product?id=7&site={site_id}"

    signup, = by_name["signup"]
    assert signup["props"] == {"app": "shop", "plan": "pro", "step": 2}  # per-call props win
    assert signup["path"] == product["path"] and signup["referrer"] == product["referrer"]

    outbound, = by_name["outbound"]
    assert outbound["props"]["url"] == f"http://localhost:{server.base_url.rsplit(':', 1)[1]}/__site__/landing"
    assert outbound["path"] == visit["long_path"]
    assert {e["sessionId"] for e in (first, product, long_page, signup, outbound)} == {first["sessionId"]}

    checkout, = by_name["checkout"]
    assert checkout["props"] == {"source": "hooks", "amount": 42, "hooked": True}
    assert checkout["url"] == f"{server.base_url}/__site__/hooks"  # the hook cut the query
    assert checkout["path"] == f"/__site__/hooks?site={site_id}"
    # A new page load makes a new in-memory id, and the server continues the visitor's visit with it.
    assert checkout["sessionId"] == first["sessionId"]
    boom, = by_name["boom"]
    assert boom["props"] == {"source": "hooks", "x": 1}  # a throwing hook sends the original event
    identify, = by_name["identify"]
    assert identify["props"] == {"source": "hooks", "plan": "team", "hooked": True}


def test_tracked_visit_shows_up_everywhere(page: Page, live_server, account, screenshots: Path):
    sign_in(page, live_server, account)
    expect(page.locator(".empty")).to_contain_text("No sites yet")
    domain = f"shop-{secrets.token_hex(4)}.example.com"
    site_id = add_site(page, domain, typed=f"https://www.{domain}/pricing")
    card = page.locator("li.site", has_text=domain)
    expect(card.locator(".codeblock").first).to_contain_text(
        f'<script defer src="{live_server.base_url}/tracker.js" data-site="{site_id}"></script>')
    expect(card.locator(".verify .codeblock")).to_contain_text("tally-verify=")
    page.screenshot(path=screenshots / "sites.png", full_page=True)

    # An empty overview says what to do next.
    page.click(f"a[href='/app/sites/{site_id}']")
    expect(page.locator(".empty")).to_contain_text("No events yet")
    expect(page.locator(".empty .codeblock")).to_contain_text(f'data-site="{site_id}"')
    # Without visits there is no bounce rate or duration, rather than 0% and 0s (as the comparison says).
    expect(page.locator("[data-stat=bounceRate] .stat-value")).to_have_text("—")
    expect(page.locator("[data-stat=avgSessionDuration] .stat-value")).to_have_text("—")
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text("0")

    visitor = page.context.new_page()
    visit = browse_site(visitor, live_server, site_id)
    events = read_events(page, live_server, site_id, expected=8)
    check_events(events, live_server, site_id, visit)
    visitor.close()

    # Overview: totals, chart and top lists.
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("3")
    expect(page.locator("[data-stat=totalEvents] .stat-value")).to_have_text("8")
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).not_to_have_text("0")
    # One visit over two page loads with three pageviews: no bounce.
    expect(page.locator("[data-stat=bounceRate] .stat-value")).to_have_text("0%")
    expect(page.locator(".chart canvas")).to_have_count(1)
    expect(page.locator("[data-panel=pages]")).to_contain_text("/__site__/shop/product")
    expect(page.locator("[data-panel=locations] button.toprow .key")).to_have_text(["Germany"])
    # No GeoIP City database here: no region data, so no Regions or Cities tabs.
    expect(page.locator("[data-panel=locations] [data-tab]")).to_have_text(["Countries"])
    # Dimensions derived at ingestion from the referrer and the desktop User-Agent (1280 px: a laptop).
    # The visit came from the news site: the hooks page, opened directly, continues it.
    expect(page.locator("[data-panel=sources] button.toprow .key")).to_have_text(["Referral"])
    page.locator("[data-panel=sources] [data-tab=source]").click()
    expect(page.locator("[data-panel=sources] button.toprow .key")).to_have_text(["news.example.org"])
    # One arrival from the news site: the app's later pages do not count it again.
    top = page.request.get(f"{live_server.base_url}/api/analytics/top-referrers?siteId={site_id}&range=24h").json()
    assert [(r["key"], r["count"]) for r in top["data"]] == [("news.example.org", 1)], top
    expect(page.locator("[data-panel=devices] button.toprow .key")).to_have_text(["Chrome"])
    for tab, value in (("os", "Linux"), ("device", "Laptop")):
        page.locator(f"[data-panel=devices] [data-tab={tab}]").click()
        expect(page.locator("[data-panel=devices] button.toprow .key")).to_have_text([value])
    page.locator("[data-panel=devices] [data-tab=browser]").click()
    page.locator("[data-panel=sources] [data-tab=channel]").click()
    expect(page.locator(".live")).to_contain_text("current visitor")
    assert page.locator("select.range").input_value() == "24h"
    export = page.locator("a", has_text="Export CSV")
    assert export.get_attribute("href") == f"/api/analytics/export?siteId={site_id}&range=24h&format=csv"
    download = page.request.get(live_server.base_url + export.get_attribute("href"))
    assert download.status == 200 and "attachment" in download.headers["content-disposition"]
    page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar stays on top of a full-page shot
    page.screenshot(path=screenshots / "overview.png", full_page=True)

    # Filtering by a country row keeps the filter in the URL.
    page.locator("[data-panel=locations] button.toprow").first.click()
    expect(page).to_have_url(re.compile(r"filter=country%3D%3DDE"))
    expect(page.locator(".chip")).to_contain_text("Country is Germany")
    page.locator(".chip button").click()
    expect(page.locator(".chip")).to_have_count(0)
    # The spec's own filter parameters still work, and show as chips of their own.
    page.locator("form.filter-form select").select_option("path")
    page.fill("form.filter-form input", "shop/product")
    page.click("form.filter-form button")
    expect(page).to_have_url(re.compile(r"path=shop%2Fproduct"))
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Page contains: shop/product"])
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("1")
    expect(page.locator("[data-panel=pages] button.toprow .key")).to_have_text(["/__site__/shop/product"])
    # The export lists the events behind what the page shows: the filter goes with it.
    export = page.locator("a", has_text="Export JSON")
    assert export.get_attribute("href") == (f"/api/analytics/export?siteId={site_id}&range=24h&path=shop%2Fproduct"
                                            "&format=json")
    exported = page.request.get(live_server.base_url + export.get_attribute("href")).json()
    assert exported and {e["path"].split("?")[0] for e in exported} == {"/__site__/shop/product"}
    page.locator(".chip button").click()
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("3")

    # Phone width: everything fits, long paths are cut with an ellipsis.
    page.set_viewport_size(PHONE)
    page.reload()
    expect(page.locator("[data-stat=totalPageviews] .stat-value")).to_have_text("3")
    assert no_horizontal_overflow(page)
    page.screenshot(path=screenshots / "overview-phone.png", full_page=True)
    page.set_viewport_size(LAPTOP)

    # Realtime panel (SPA navigation through the tab), then it keeps polling.
    page.click("nav.tabs a:has-text('Realtime')")
    expect(page).to_have_url(re.compile(r"/realtime"))
    expect(page.locator("[data-stat=activeVisitors] .stat-value")).not_to_have_text("0")
    expect(page.locator(".feed")).to_contain_text("identify")
    expect(page.locator(".feed")).to_contain_text("signup")
    first_update = page.locator("[role=status]").inner_text()
    expect(page.locator("[role=status]")).not_to_have_text(first_update, timeout=15000)
    page.screenshot(path=screenshots / "realtime.png", full_page=True)

    # Event log with paging (3 per page through ?limit=3).
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=24h&limit=3")
    expect(page.locator("table.log tbody tr")).to_have_count(3)
    expect(page.locator(".pager")).to_contain_text(f"1{DASH}3 of 8")
    page.click("text=Older →")
    expect(page.locator(".pager")).to_contain_text(f"4{DASH}6 of 8")
    page.click("text=Older →")
    expect(page.locator(".pager")).to_contain_text(f"7{DASH}8 of 8")
    expect(page.locator("text=Older →")).to_be_disabled()
    page.set_viewport_size(PHONE)
    assert no_horizontal_overflow(page)
    page.set_viewport_size(LAPTOP)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=24h")
    expect(page.locator("table.log tbody tr")).to_have_count(8)
    page.screenshot(path=screenshots / "events.png", full_page=True)
    # Filtered by a name, the log exports what it lists (the export had every event of the range).
    page.fill("form.filter-form input", "signup")
    page.click("form.filter-form button")
    expect(page.locator("table.log tbody tr")).to_have_count(1)
    href = page.locator("a", has_text="Export JSON").get_attribute("href")
    exported = page.request.get(live_server.base_url + href).json()
    assert [e["name"] for e in exported] == ["signup"], href


def test_api_keys_create_once_list_and_revoke(page: Page, live_server, account, screenshots: Path):
    sign_in(page, live_server, account, "/app/keys")
    expect(page.locator(".empty")).to_contain_text("No API keys yet")
    page.fill("input[name=name]", "backend server")
    page.check("input[name=scope][value=admin]")
    page.click("form.key-form button[type=submit]")
    notice = page.locator(".notice")
    expect(notice).to_contain_text("only time it is shown")
    raw = notice.locator("code").inner_text()
    assert re.fullmatch(r"tally_live_sk_[A-Za-z0-9_-]+", raw)
    row = page.locator("table.keys tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("backend server")
    expect(row).to_contain_text("read, write, admin")
    expect(row).to_contain_text("active")
    page.screenshot(path=screenshots / "keys.png", full_page=True)

    auth = {"Authorization": f"Bearer {raw}"}
    assert page.request.get(live_server.base_url + "/v1/events", headers=auth).status == 200

    page.reload()
    assert raw not in page.content()  # the value is never shown again
    page.click("table.keys button:has-text('Revoke')")
    page.click("table.keys button:has-text('Confirm revoke')")
    expect(page.locator("table.keys tbody tr")).to_contain_text("revoked")
    expect(page.locator("table.keys button")).to_have_count(0)
    expect(page.locator("input[name=name]")).to_be_focused()  # no key left to revoke: back to the form
    assert page.request.get(live_server.base_url + "/v1/events", headers=auth).status == 401


def test_domain_verification(page: Page, live_server, account):
    sign_in(page, live_server, account)
    domain = f"blog-{secrets.token_hex(4)}.example.net"
    add_site(page, domain)
    card = page.locator("li.site", has_text=domain)
    expect(card.locator(".badge")).to_have_text("pending verification")
    record = card.locator(".verify .codeblock code").inner_text()
    assert record.startswith("tally-verify=")
    card.locator("button", has_text="Check DNS now").click()
    expect(card.locator(".verify [role=status]")).to_contain_text("Record not found yet")

    site_pages.TXT_RECORDS[domain] = ["v=spf1 -all", record]
    card.locator("button", has_text="Check DNS now").click()
    expect(card.locator(".badge")).to_have_text("✓ verified")
    page.reload()
    expect(page.locator("li.site", has_text=domain).locator(".badge")).to_have_text("✓ verified")
