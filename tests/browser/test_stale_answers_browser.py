"""Slow answers left behind, in a real headless Chromium: a list's read answered after a newer read of the
same list (the API keys, a site's goals, its shared links, a public dashboard's range) is not drawn over it; a
form sent twice while its first request is on its way creates one thing; an action answered after the
visitor went to another page does not draw its page over that one."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta

from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveServer
from tests.browser.held_requests import answer_late, held_request, settle, wait_held
from tests.browser.test_dashboard_browser import add_site, sign_in
from tests.browser.test_panels_browser import panel


def test_a_slow_first_list_of_keys_does_not_hide_a_key_created_since(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account)
    held = held_request(page, "**/api/keys")
    page.goto(f"{live_server.base_url}/app/keys")
    first = wait_held(page, held)
    page.fill("input[name=name]", "backend")
    page.click("form.key-form button[type=submit]")
    rows = page.locator("table.keys tbody tr")
    expect(rows).to_have_count(1)
    # What the server said when the page opened, before the key existed.
    answer_late(page, first, "**/api/keys", {"keys": []})
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("backend")


def test_a_key_form_sent_twice_quickly_creates_one_key(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account, "/app/keys")
    expect(page.locator(".empty")).to_contain_text("No API keys yet")
    held = held_request(page, "**/api/keys", "POST")
    page.fill("input[name=name]", "backend")
    page.click("form.key-form button[type=submit]")
    first = wait_held(page, held)
    page.press("input[name=name]", "Enter")  # again, while the first is on its way
    settle(page)
    first.continue_()
    expect(page.locator(".notice code")).to_be_visible()
    expect(page.locator("table.keys tbody tr")).to_have_count(1)
    settle(page)
    keys = page.request.get(f"{live_server.base_url}/api/keys").json()["keys"]
    assert [k["name"] for k in keys] == ["backend"]
    expect(page.locator("form.key-form button[type=submit]")).not_to_have_attribute("aria-disabled", "true")


def test_a_slow_first_list_of_goals_does_not_hide_a_goal_added_since(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account)
    site_id = add_site(page, f"goals-{secrets.token_hex(4)}.example.com")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    goals = panel(page, "goals")
    held = held_request(page, "**/api/sites/*/goals")
    goals.locator("button", has_text="Manage goals").click()
    first = wait_held(page, held)
    manage = goals.locator(".goal-manage")
    manage.locator("input[name=goal_value]").fill("signup")
    manage.locator("button[type=submit]").click()
    expect(manage.locator(".goal-list li")).to_have_text(["eventsignupRemove"])
    answer_late(page, first, "**/api/sites/*/goals", {"goals": []})
    expect(manage.locator(".goal-list li")).to_have_text(["eventsignupRemove"])


def overview_drawn(page: Page) -> None:
    """The overview and its panels have drawn: until then they grow above the shared links' box and can move
    its summary from under a click (a click that opened nothing was seen once under a full run's load)."""
    expect(page.locator("[data-stat=uniqueVisitors]")).to_be_visible()
    expect(page.locator(".loading")).to_have_count(0)


def test_a_slow_first_list_of_shared_links_does_not_hide_a_link_created_since(page: Page, live_server: LiveServer,
                                                                           account):
    sign_in(page, live_server, account)
    site_id = add_site(page, f"links-{secrets.token_hex(4)}.example.com")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}")
    overview_drawn(page)
    held = held_request(page, "**/api/sites/*/shared-links")
    page.click("details.shared-links summary")
    first = wait_held(page, held)
    page.fill("input[name=link_name]", "For the board")
    page.click("details.shared-links button[type=submit]")
    links = page.locator("li.shared-link")
    expect(links).to_have_count(1)
    answer_late(page, first, "**/api/sites/*/shared-links", {"links": []})
    expect(links).to_have_count(1)
    expect(page.locator(".shared-list")).not_to_contain_text("No shared links.")


def test_a_shared_link_form_sent_twice_quickly_creates_one_link(page: Page, live_server: LiveServer, account):
    sign_in(page, live_server, account)
    site_id = add_site(page, f"twice-{secrets.token_hex(4)}.example.com")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}")
    overview_drawn(page)
    page.click("details.shared-links summary")
    expect(page.locator(".shared-list")).to_contain_text("No shared links.")
    held = held_request(page, "**/api/sites/*/shared-links", "POST")
    page.fill("input[name=link_name]", "For the board")
    page.click("details.shared-links button[type=submit]")
    first = wait_held(page, held)
    page.press("input[name=link_name]", "Enter")  # again, while the first is on its way
    settle(page)
    first.continue_()
    expect(page.locator("li.shared-link")).to_have_count(1)
    settle(page)
    links = page.request.get(f"{live_server.base_url}/api/sites/{site_id}/shared-links").json()["links"]
    assert [link["name"] for link in links] == ["For the board"]


def test_a_site_added_after_leaving_the_sites_page_does_not_draw_the_list_over_the_next(page: Page,
                                                                                      live_server: LiveServer,
                                                                                      account):
    sign_in(page, live_server, account)
    held = held_request(page, "**/api/sites", "POST")
    page.fill("input[name=domain]", f"late-{secrets.token_hex(4)}.example.com")
    page.click("form.add-site button")
    added = wait_held(page, held)
    page.click("[data-nav=keys]")
    expect(page.locator("#view h1")).to_have_text("API keys")
    answer_late(page, added, "**/api/sites")
    expect(page.locator("#view h1")).to_have_text("API keys")
    expect(page.locator("form.add-site")).to_have_count(0)
    assert page.url == f"{live_server.base_url}/app/keys"


def test_a_public_dashboards_slow_range_left_behind_is_not_drawn(page: Page, live_server: LiveServer, account):
    base = live_server.base_url
    sign_in(page, live_server, account, "/app/keys")
    made = page.request.post(f"{base}/api/keys", data={"name": "share", "scopes": ["read", "write"]}).json()
    auth = {"Authorization": f"Bearer {made['key']}"}
    dashboard = page.request.post(f"{base}/v1/dashboards", headers=auth, data={
        "name": "Launch", "charts": [{"title": "Signups", "type": "bar", "event": "signup"}]}).json()
    shared = page.request.post(f"{base}/v1/dashboards/{dashboard['id']}/share", headers=auth).json()
    held = held_request(page, "**/public/dashboards/*/data*")
    page.goto(shared["public_url"])
    seven_days = wait_held(page, held)  # the page's first read: the last 7 days
    with page.expect_response("**/public/dashboards/*/data*") as answer:
        page.locator("#range").select_option("30:day")
    thirty = answer.value.json()
    status = page.locator("#status")
    period = f"{thirty['from'][:16]} \u2013 {thirty['to'][:16]} UTC"  # en dash
    expect(status).to_have_text(period)
    answer_late(page, seven_days, "**/public/dashboards/*/data*")
    expect(status).to_have_text(period)
    start = datetime.fromisoformat(thirty["from"].replace("Z", "+00:00"))
    assert datetime.now(UTC) - start > timedelta(days=29)


def test_a_slow_answer_left_behind_does_not_end_the_newer_loads_dimming(page: Page, live_server: LiveServer,
                                                                       account):
    """While a range's figures (or a tab's rows) load, the old ones stay dimmed (.loading); the answer of a
    load left behind ended the dimming, so the previous range's figures showed as current under the new one."""
    sign_in(page, live_server, account)
    site_id = add_site(page, f"dim-{secrets.token_hex(4)}.example.com")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    overview = page.locator(".overview")
    expect(page.locator(".stats")).to_be_visible()
    expect(overview).not_to_have_class(re.compile("loading"))
    week = held_request(page, "**/api/analytics/overview?*range=7d*")
    month = held_request(page, "**/api/analytics/overview?*range=30d*")
    page.locator("select.range").select_option("7d")
    left_behind = wait_held(page, week)
    page.locator("select.range").select_option("30d")
    latest = wait_held(page, month)
    answer_late(page, left_behind, "**/api/analytics/overview?*range=7d*")
    expect(overview).to_have_class(re.compile("loading"))  # the 30 days' figures are not there yet
    latest.continue_()
    expect(overview).not_to_have_class(re.compile("loading"))

    pages = panel(page, "pages")
    body = pages.locator(".panel-body")
    expect(body).not_to_have_class(re.compile("loading"))
    entries = held_request(page, "**/api/analytics/breakdown?*property=entry_page*")
    exits = held_request(page, "**/api/analytics/breakdown?*property=exit_page*")
    pages.locator("[data-tab=entry_page]").click()
    left_behind = wait_held(page, entries)
    pages.locator("[data-tab=exit_page]").click()
    latest = wait_held(page, exits)
    answer_late(page, left_behind, "**/api/analytics/breakdown?*property=entry_page*")
    expect(body).to_have_class(re.compile("loading"))
    latest.continue_()
    expect(body).not_to_have_class(re.compile("loading"))


def test_revoking_a_link_or_removing_a_goal_twice_quickly_says_no_error(page: Page, live_server: LiveServer,
                                                                        account):
    """A second press of Revoke (Remove) while the first is on its way sent a second DELETE, whose 404 was
    shown as an error ("not found", "Could not save") for an action that succeeded."""
    sign_in(page, live_server, account)
    site_id = add_site(page, f"revoke-{secrets.token_hex(4)}.example.com")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    page.click("details.shared-links summary")
    page.fill("input[name=link_name]", "For the board")
    page.click("details.shared-links button[type=submit]")
    expect(page.locator("li.shared-link")).to_have_count(1)
    held = held_request(page, "**/api/sites/*/shared-links/*", "DELETE")
    page.get_by_role("button", name="Revoke For the board").focus()
    page.keyboard.press("Enter")
    first = wait_held(page, held)
    page.keyboard.press("Enter")  # again, while the first is on its way
    settle(page)
    first.continue_()
    expect(page.locator(".shared-list")).to_contain_text("No shared links.")
    settle(page)
    expect(page.locator("details.shared-links [role=alert]")).to_be_hidden()

    goals = panel(page, "goals")
    goals.locator("button", has_text="Manage goals").click()
    manage = goals.locator(".goal-manage")
    manage.locator("input[name=goal_value]").fill("signup")
    manage.locator("button[type=submit]").click()
    expect(manage.locator(".goal-list li")).to_have_text(["eventsignupRemove"])
    held = held_request(page, "**/api/sites/*/goals/*", "DELETE")
    manage.get_by_role("button", name="Remove goal signup").focus()
    page.keyboard.press("Enter")
    first = wait_held(page, held)
    page.keyboard.press("Enter")
    settle(page)
    first.continue_()
    expect(manage.locator(".goal-list li")).to_have_count(0)
    settle(page)
    expect(manage.locator("[role=alert]")).to_be_hidden()


def test_a_slow_live_count_left_behind_is_not_drawn_over_the_next(page: Page, live_server: LiveServer, account):
    """The overview's current-visitor count polls every 15 s; a poll answered after the next one had drawn its
    count replaced it with the older figure (or, failing late, cleared it)."""
    sign_in(page, live_server, account)
    site_id = add_site(page, f"live-{secrets.token_hex(4)}.example.com")
    page.clock.install()  # time runs as usual; run_for jumps to the next poll
    held = held_request(page, "**/api/analytics/realtime?*")
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    first = wait_held(page, held)
    live = page.locator(".live")
    with page.expect_response("**/api/analytics/realtime?*"):
        page.clock.run_for(15_000)
    expect(live).to_have_text("● 0 current visitors")
    answer_late(page, first, "**/api/analytics/realtime?*", {"activeVisitors": 7})
    expect(live).to_have_text("● 0 current visitors")
