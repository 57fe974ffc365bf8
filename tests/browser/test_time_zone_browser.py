"""The dashboard seen from a browser in New York (UTC-5): the API's buckets are UTC days and hours, and the
chart says so. Drawn in the browser's zone, a 30-day chart's last point (today, UTC) sat at 7pm of the day
before, and its legend dated today's traffic "yesterday 7:00pm"."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_panels_browser import open_site


@pytest.fixture
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "timezone_id": "America/New_York"}


def hover_last_point(page: Page) -> None:
    plot = page.locator(".chart .u-over")
    box = plot.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)


def test_chart_dates_utc_days_as_the_api_labels_them(page: Page, live_server, account):
    site_id = open_site(page, live_server, account)
    for range_ in ("30d", "24h"):
        page.goto(f"{live_server.base_url}/app/sites/{site_id}?range={range_}")
        expect(page.locator(".chart canvas")).to_have_count(1)
        labels = page.evaluate("async (q) => (await (await fetch('/api/analytics/overview?' + q)).json())"
                               ".timeSeries.map((p) => p.label)", f"siteId={site_id}&range={range_}")
        hover_last_point(page)
        time = page.locator(".chart .u-legend .u-series").first
        # The last bucket (this UTC day or hour) is named as the API names it: "Nov 28", "Nov 28 14:00".
        expect(time.locator(".u-value")).to_have_text(labels[-1])
        expect(time.locator(".u-label")).to_have_text("Time (UTC)")
        expect(page.locator(".chart-zone")).to_have_text("Times in UTC")


def test_event_log_names_the_zone_of_its_times(page: Page, live_server, account):
    """The log writes times in the browser's zone, beside a chart in UTC: its column says which zone."""
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}/events?range=24h")
    expect(page.locator("table.log th").first).to_have_text(re.compile(r"^Time \((EST|EDT|GMT-[45])\)$"))
    first = page.locator("table.log tbody tr").first.locator("td").first
    created = first.get_attribute("title")  # the stored UTC time
    shown = page.evaluate("(iso) => new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', month: 'short',"
                          " day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit' })"
                          ".format(new Date(iso))", created)
    expect(first).to_have_text(shown)
