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


def test_a_site_cards_setup_button_says_whether_it_is_open(page: Page, live_server, account):
    """Each card's "Set up & verify" (or "Snippet") shows and hides its setup: a screen reader heard a row of
    same-named buttons, none saying which site it was for or whether its section was open."""
    sign_in(page, live_server, account)
    domains = [f"disclose-{i}-{secrets.token_hex(3)}.example.org" for i in range(2)]
    for domain in domains:
        page.fill("input[name=domain]", domain)
        page.click("form.add-site button")
        expect(page.locator("li.site", has_text=domain)).to_be_visible()
    page.reload()
    card = page.locator("li.site", has_text=domains[0])
    toggle = card.get_by_role("button", name=f"Set up & verify: {domains[0]}")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(card.locator(".setup")).to_be_hidden()
    toggle.click()
    expect(card.locator(".setup")).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(toggle).to_have_attribute("aria-controls", card.locator(".setup").get_attribute("id"))
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "false")
