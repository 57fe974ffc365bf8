"""A site with a long name on a phone (390 px wide) in a real headless Chromium: its title in the header of
the site's pages, in the site list and on a shared link's page shows the whole name (wrapped, not cut off),
also carries it as a title attribute, and nothing makes the document scroll sideways."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

from tests.browser.test_dashboard_browser import PHONE, add_site, sign_in

DOMAIN = "a-very-long-company-name-for-analytics.shop.example.com"
re_full_prefix = re.compile(r"^tally_live_sk_[A-Za-z0-9_-]{4,}…$")  # URL-safe base64


def no_sideways_scroll(page: Page) -> bool:
    """Nothing is wider than the viewport, and the document does not move when asked to scroll sideways."""
    return page.evaluate("""() => {
        window.scrollTo(200, window.scrollY)
        const moved = window.scrollX
        window.scrollTo(0, window.scrollY)
        return moved === 0 && document.documentElement.scrollWidth <= window.innerWidth
            && document.body.scrollWidth <= window.innerWidth
    }""")


def expect_whole_name(title: Locator, page: Page) -> None:
    expect(title).to_have_text(DOMAIN)
    expect(title).to_have_attribute("title", DOMAIN)
    shown = title.evaluate("""el => {
        const box = el.getBoundingClientRect()
        return {cut: el.scrollWidth > el.clientWidth, left: box.left, right: box.right, width: innerWidth}
    }""")
    assert not shown["cut"] and shown["left"] >= 0 and shown["right"] <= shown["width"], shown
    assert no_sideways_scroll(page)


def test_a_long_site_name_fits_a_phone(page: Page, live_server, account, screenshots: Path):
    sign_in(page, live_server, account)
    site_id = add_site(page, DOMAIN)
    page.set_viewport_size(PHONE)
    for view in ("", "/realtime", "/events"):
        page.goto(f"{live_server.base_url}/app/sites/{site_id}{view}")
        expect_whole_name(page.locator(".page-head h1"), page)
        # "Sites /" keeps its one line beside the title, and the verification badge stays on the screen.
        back = page.locator(".title-row > a")
        assert back.evaluate("a => a.getBoundingClientRect().height <= parseFloat(getComputedStyle(a).lineHeight) + 1")
        expect(page.locator(".title-row .badge")).to_be_in_viewport(ratio=1)
    page.screenshot(path=screenshots / "site-title-phone.png", full_page=True)

    page.goto(f"{live_server.base_url}/app")
    expect_whole_name(page.locator("li.site .site-domain"), page)

    # A shared link's page names the site the same way.
    link = page.request.post(f"{live_server.base_url}/api/sites/{site_id}/shared-links", data={}).json()
    page.goto(link["url"])
    expect_whole_name(page.locator(".page-head h1"), page)


def test_api_keys_fit_a_phone(page: Page, live_server, account, screenshots: Path):
    """The keys table was 640 px wide: on a phone a key's created time, status and Revoke needed sideways
    scrolling, and every prefix was cut to the same "tally_…". Each key is a card of labelled lines there."""
    sign_in(page, live_server, account, "/app/keys")
    page.set_viewport_size(PHONE)
    page.fill("input[name=name]", "backend server")
    page.click("form.key-form button[type=submit]")
    row = page.locator("table.keys tbody tr")
    expect(row).to_have_count(1)
    prefix = row.locator("td[data-label=Key]")
    expect(prefix).to_have_text(re_full_prefix)
    assert not prefix.evaluate("el => el.scrollWidth > el.clientWidth")  # the whole prefix shows
    expect(row.locator("td[data-label=Status]")).to_contain_text("active")
    revoke = row.locator("button", has_text="Revoke")
    revoke.scroll_into_view_if_needed()
    expect(revoke).to_be_in_viewport(ratio=1)  # scrolling down, never sideways
    assert no_sideways_scroll(page)
    assert page.locator(".table-wrap").evaluate("el => el.scrollWidth <= el.clientWidth")
    page.screenshot(path=screenshots / "keys-phone.png", full_page=True)
