"""The breakdown panels' tab switchers follow the WAI-ARIA tabs pattern in a real headless Chromium, used
from the keyboard alone: a tablist of tabs, each aria-selected or not and controlling the panel's body (a
tabpanel labelled by the selected tab), one tab stop per panel (roving tabindex), and Left/Right (wrapping),
Home and End moving to a tab and showing its rows. The site's events are test_panels_browser's table."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.test_panels_browser import expect_rows, open_site, panel


def tab_state(page: Page, name: str) -> dict:
    """The panel's tabs as the accessibility tree sees them, and its tabpanel."""
    return panel(page, name).evaluate("""p => {
        const list = p.querySelector('[role=tablist]')
        const tabs = [...list.querySelectorAll('[role=tab]')]
        const selected = tabs.filter(t => t.getAttribute('aria-selected') === 'true')
        const controlled = document.getElementById(selected[0].getAttribute('aria-controls'))
        return {
            tabs: tabs.map(t => t.dataset.tab),
            selected: selected.map(t => t.dataset.tab),
            unselected: tabs.filter(t => t.getAttribute('aria-selected') === 'false').length,
            stops: tabs.filter(t => t.tabIndex === 0).map(t => t.dataset.tab),
            focused: tabs.includes(document.activeElement) ? document.activeElement.dataset.tab : null,
            panelRole: controlled && controlled.getAttribute('role'),
            panelInside: controlled && p.contains(controlled) && !list.contains(controlled),
            labelledBy: controlled && controlled.getAttribute('aria-labelledby') === selected[0].id,
            names: tabs.map(t => t.getAttribute('aria-label') || t.textContent),
        }
    }""")


def expect_selected(page: Page, name: str, key: str, focused: bool = True) -> dict:
    expect(panel(page, name).locator(f"[role=tab][data-tab='{key}']")).to_have_attribute("aria-selected", "true")
    state = tab_state(page, name)
    assert state["selected"] == [key], state
    assert state["unselected"] == len(state["tabs"]) - 1, state
    assert state["stops"] == [key], state  # one tab stop: the selected tab
    assert state["focused"] == (key if focused else None), state
    assert state["panelRole"] == "tabpanel" and state["panelInside"] and state["labelledBy"], state
    return state


def test_panel_tabs_work_from_the_keyboard(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect_rows(
        page,
        "sources",
        [("Organic Search", "2"), ("Direct", "1"), ("Organic Social", "1"), ("Paid Search", "1"), ("Referral", "1")],
    )
    state = expect_selected(page, "sources", "channel", focused=False)
    assert state["tabs"] == ["channel", "source", "utm_medium", "utm_source", "utm_campaign", "utm_term", "utm_content"]
    # The UTM tabs say what they are: their "UTM:" group label is not read out on its own.
    assert state["names"][2:] == ["UTM medium", "UTM source", "UTM campaign", "UTM term", "UTM content"]
    expect(panel(page, "sources").locator("[role=tablist]")).to_have_attribute("aria-label", "Sources")

    # Tab reaches the panel's one tab stop, the selected tab.
    page.locator("select.range").focus()
    for _ in range(20):
        page.keyboard.press("Tab")
        if tab_state(page, "sources")["focused"]:
            break
    expect_selected(page, "sources", "channel")

    page.keyboard.press("ArrowRight")
    expect_selected(page, "sources", "source")
    expect_rows(page, "sources", [("Google", "3"), ("Facebook", "1"), ("news.ycombinator.com", "1")])
    page.keyboard.press("End")
    expect_selected(page, "sources", "utm_content")
    expect_rows(page, "sources", [("ad1", "1")])
    page.keyboard.press("ArrowRight")  # wraps to the first
    expect_selected(page, "sources", "channel")
    expect_rows(
        page,
        "sources",
        [("Organic Search", "2"), ("Direct", "1"), ("Organic Social", "1"), ("Paid Search", "1"), ("Referral", "1")],
    )
    page.keyboard.press("ArrowLeft")  # wraps to the last
    expect_selected(page, "sources", "utm_content")
    page.keyboard.press("ArrowLeft")
    expect_selected(page, "sources", "utm_term")
    expect_rows(page, "sources", [("analytics", "1")])
    page.keyboard.press("Home")
    expect_selected(page, "sources", "channel")
    # The tab's rows are loaded before Tab moves into them (pressed while they were being replaced, the focus
    # had nowhere to go: a flake seen once).
    expect_rows(
        page,
        "sources",
        [("Organic Search", "2"), ("Direct", "1"), ("Organic Social", "1"), ("Paid Search", "1"), ("Referral", "1")],
    )

    # Tab leaves the tablist for the panel's rows (not the next tab), Shift+Tab comes back to the tab.
    page.keyboard.press("Tab")
    expect(panel(page, "sources").locator("button.toprow").first).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect_selected(page, "sources", "channel")

    # Another panel's tabs are a tab stop of their own, and Enter on a row still filters by it.
    panel(page, "pages").locator("[role=tab][aria-selected=true]").focus()
    page.keyboard.press("End")
    expect_selected(page, "pages", "exit_page")
    expect_rows(page, "pages", [("/pricing", "3"), ("/", "2"), ("/blog/a", "1")])
    expect_selected(page, "sources", "channel", focused=False)
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Exit page is /pricing"])

    # The Goals panel's two tabs (shown under a goal filter) are a tablist too.
    panel(page, "goals").locator("button.toprow[data-key=signup]").click()
    panel(page, "goals").locator("[role=tab][aria-selected=true]").focus()
    page.keyboard.press("ArrowRight")
    expect_selected(page, "goals", "props")
    expect(panel(page, "goals").locator("select.prop-picker")).to_be_visible()
    page.keyboard.press("ArrowRight")
    expect_selected(page, "goals", "goal")
