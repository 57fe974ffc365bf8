"""The dashboard seen from a browser in New York (UTC-5). A site added there is in New York's time zone, as
Plausible's form makes it: its days begin at New York's midnight, and the chart is drawn and labelled in the
site's zone and says which. Before sites had a zone, the buckets were UTC days and a 30-day chart drawn in the
browser's zone dated today's traffic "yesterday 7:00pm"."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_panels_browser import open_site

NEW_YORK = "America/New_York"


@pytest.fixture
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "timezone_id": NEW_YORK}


def hover_last_point(page: Page) -> None:
    plot = page.locator(".chart .u-over")
    box = plot.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)


def site_zone(page: Page, site_id: str) -> str:
    return page.evaluate("async (id) => (await (await fetch('/api/sites')).json()).find((s) => s.id === id).timezone",
                         site_id)


def expect_chart_in(page: Page, base_url: str, site_id: str, zone: str) -> None:
    for range_ in ("30d", "24h"):
        page.goto(f"{base_url}/app/sites/{site_id}?range={range_}")
        expect(page.locator(".chart canvas")).to_have_count(1)
        labels = page.evaluate("async (q) => (await (await fetch('/api/analytics/overview?' + q)).json())"
                               ".timeSeries.map((p) => p.label)", f"siteId={site_id}&range={range_}")
        if range_ == "30d":  # the last point is the site's today
            assert labels[-1] == datetime.now(ZoneInfo(zone)).strftime("%b %d")
        hover_last_point(page)
        time = page.locator(".chart .u-legend .u-series").first
        # The last bucket (the site's day or hour) is named as the API names it: "Nov 28", "Nov 28 14:00".
        expect(time.locator(".u-value")).to_have_text(labels[-1])
        expect(time.locator(".u-label")).to_have_text(f"Time ({zone})")
        expect(page.locator(".chart-zone")).to_have_text(f"Times in {zone}")


def test_a_site_added_in_new_york_has_new_yorks_days_and_its_chart_says_so(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    assert site_zone(page, site_id) == NEW_YORK
    expect_chart_in(page, live_server.base_url, site_id, NEW_YORK)


def test_the_sites_card_changes_its_time_zone(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app")
    card = page.locator(f"li.site[data-site='{site_id}']")
    zone = card.get_by_label("Time zone")
    expect(zone.locator("option")).to_have_count(1)  # the site's own, until the select is reached
    zone.focus()
    zone.select_option("Asia/Tokyo")
    expect(card.locator(".zone [role=status]")).to_have_text(re.compile("^Saved"))
    assert site_zone(page, site_id) == "Asia/Tokyo"
    page.reload()  # the choice was stored, not only shown
    expect(page.locator(f"li.site[data-site='{site_id}']").get_by_label("Time zone")).to_have_value("Asia/Tokyo")
    expect_chart_in(page, live_server.base_url, site_id, "Asia/Tokyo")


def test_event_log_names_the_zone_of_its_times(page: Page, live_server, account):
    """The log writes times in the browser's zone, which may not be the chart's: its column says which zone."""
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=24h")
    expect(page.locator("table.log th").first).to_have_text(re.compile(r"^Time \((EST|EDT|GMT-[45])\)$"))
    first = page.locator("table.log tbody tr").first.locator("td").first
    created = first.get_attribute("title")  # the stored UTC time
    shown = page.evaluate("(iso) => new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', month: 'short',"
                          " day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' })"
                          ".format(new Date(iso))", created)
    expect(first).to_have_text(shown)
