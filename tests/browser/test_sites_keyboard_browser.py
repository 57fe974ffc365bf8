"""The Sites page with the keyboard alone: adding a site and verifying it each redraw the list, which took
away the control the keyboard was on (focus fell to the page's body, and Tab started again from the top);
focus now goes to that site's name, which a screen reader reads with its verification mark."""

from __future__ import annotations

import secrets

from playwright.sync_api import Page, expect

from tests.browser import site_pages
from tests.browser.test_dashboard_browser import sign_in


def test_adding_and_verifying_a_site_keep_the_keyboard_on_it(page: Page, live_server, account):
    sign_in(page, live_server, account)
    domain = f"keys-{secrets.token_hex(4)}.example.org"
    page.focus("input[name=domain]")
    page.keyboard.type(domain)
    page.keyboard.press("Enter")
    card = page.locator("li.site", has_text=domain)
    expect(card.locator(".verify .codeblock code")).to_be_visible()
    expect(card.locator("a.site-domain")).to_be_focused()

    site_pages.TXT_RECORDS[domain] = [card.locator(".verify .codeblock code").inner_text()]
    card.locator("button", has_text="Check DNS now").focus()
    page.keyboard.press("Enter")
    expect(card.locator(".badge")).to_have_text("✓ verified")
    expect(card.locator("a.site-domain")).to_be_focused()
    # The next Tab reaches the site's own controls, not the page's header.
    page.keyboard.press("Tab")
    expect(card.locator("button", has_text="Snippet")).to_be_focused()
