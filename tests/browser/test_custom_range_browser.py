"""The range picker's "Custom range…": two days and Apply read the site's days between them, kept in the URL
(a reload or a shared address shows the same days), carried by the panels and the export, and cleared by a
named range; and its calendar periods (today, yesterday, this month, last month, this year, the last 12 months,
all time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Page, expect

from tests.browser.test_panels_browser import expect_rows, expect_unfiltered, open_site


def pick_days(page: Page, first: str, last: str) -> None:
    page.get_by_label("Date range").select_option("custom")
    page.get_by_label("From", exact=True).fill(first)
    page.get_by_label("To", exact=True).fill(last)
    page.get_by_role("button", name="Apply").click()


def query(page: Page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}


def stats(page: Page) -> list[str]:
    return [page.locator(f"[data-stat={stat}] .stat-value").inner_text()
            for stat in ("uniqueVisitors", "totalPageviews", "totalEvents", "bounceRate")]


def test_a_custom_range_reads_the_days_picked_and_stays_in_the_url(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)  # its visits are of the last 31 hours
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=7d")
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text("8")
    week = stats(page)
    today = datetime.now(UTC).date()

    pick_days(page, (today - timedelta(days=30)).isoformat(), (today - timedelta(days=20)).isoformat())
    expect(page).to_have_url(f"{live_server.base_url}/app/sites/{site_id}?range=custom&from="
                             f"{today - timedelta(days=30)}&to={today - timedelta(days=20)}")
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text("0")

    # The last three days hold every visit, as the last 7 days do.
    first = (today - timedelta(days=2)).isoformat()
    pick_days(page, first, today.isoformat())
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text("8")
    assert stats(page) == week
    expect_rows(page, "pages", [("/", "6"), ("/pricing", "3"), ("/blog/a", "2")])
    export = page.get_by_role("link", name="Export CSV").get_attribute("href")
    assert parse_qs(urlsplit(export).query)["from"] == [first]
    page.reload()  # the address keeps the days
    expect(page.get_by_label("Date range")).to_have_value("custom")
    expect(page.get_by_label("From", exact=True)).to_have_value(first)
    expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text("8")
    assert stats(page) == week

    # Days the wrong way round are refused where they were picked; the page keeps its range.
    pick_days(page, today.isoformat(), (today - timedelta(days=1)).isoformat())
    expect(page.get_by_role("alert")).to_have_text("Pick a first and a last day, the first not after the last.")
    assert query(page)["from"] == first

    page.get_by_label("Date range").select_option("24h")
    expect_unfiltered(page)
    assert query(page) == {"range": "24h"}

    # The site's calendar periods are in the picker: today shows what the API counts for the site's today,
    # none of the two visits of 30 hours ago; all time, every visit.
    for period in ("today", "yesterday", "last_month", "year", "12mo", "all"):
        page.get_by_label("Date range").select_option(period)
        expect(page).to_have_url(f"{live_server.base_url}/app/sites/{site_id}?range={period}")
        counted = page.evaluate("async (q) => (await (await fetch(`/api/analytics/overview?${q}`)).json())"
                                ".uniqueVisitors", f"siteId={site_id}&range={period}")
        if period == "today":
            assert counted <= 6  # the two visits of 30 hours ago are before today
        if period == "all":
            assert counted == 8
        expect(page.locator("[data-stat=uniqueVisitors] .stat-value")).to_have_text(str(counted))
