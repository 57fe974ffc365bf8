"""The overview's breakdown panels in a real headless Chromium: Sources, Pages, Locations, Devices and
Goals show exact rows; clicking a row adds a chip and a `filter=` term to the URL and narrows every panel
and the totals; removing the chip restores them; a URL with filters opens filtered; the comparison
toggle shows each figure's change; a goal drills down into a custom property.

The site's events are stored as rows with known visit dimensions (what ingestion derives from the
User-Agent, the UTM fields and the referrer), so every number below is worked out by hand:

   pages, a minute apart   channel, source, utm              place              browser, OS, size
A  / /pricing signup(pro)  Organic Search, Google            DE Berlin Berlin   Chrome 130, Windows, Desktop
F  /                       Organic Search, Google            DE Berlin Berlin   Firefox 128, Windows, Desktop
B  /blog/a                 Paid Search, Google, cpc spring   DE Bavaria Munich  Firefox 128, Linux, Laptop
C  / /pricing signup(free) Organic Social, Facebook, spring  FR IdF Paris       Safari 17, iOS, Mobile
D  /blog/a /               Direct                            US                 Chrome 129, Android, Mobile
E  /pricing signup(pro)    Referral, news.ycombinator.com    US                 Chrome 130, Mac OS X, Desktop
P, Q: one pageview of / each, 30 hours ago (the previous period of "Last 24 hours"), direct from DE.

Every event carries the A/B prop `variant` (a: A, F, E; b: B, C, D); signups also carry `plan`.
Goals: the custom event `signup` and the page visit `/pricing`.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from playwright.sync_api import Page, expect

from app.appkeys import POOL
from storage import events as events_store
from storage.ids import new_id
from tests.browser.conftest import LiveServer
from tests.browser.test_dashboard_browser import LAPTOP, PHONE, add_site, no_horizontal_overflow, sign_in

COLUMNS = (
    "id", "workspace_id", "env", "site_id", "name", "session_id", "properties", "url", "path", "referrer",
    "title", "viewport_w", "country", "ip_hash", "ts", "received_at",
    "browser", "browser_version", "os", "os_version", "device", "utm_source", "utm_medium", "utm_campaign",
    "utm_term", "utm_content", "source", "channel", "region", "city",
)
CHROME_WIN = ("Chrome", "130", "Windows", "10", "Desktop")
UTM_NONE = (None, None, None, None, None)
# visitor: (minutes ago of the first event, device, utm, source, channel, country, region, city, variant,
#           events as (minutes after the first, name, path, extra props))
VISITS = {
    "A": (120, CHROME_WIN, UTM_NONE, "Google", "Organic Search", "DE", "Berlin", "Berlin", "a",
          [(0, "pageview", "/", {}), (1, "pageview", "/pricing", {}), (2, "signup", "/pricing", {"plan": "pro"})]),
    "F": (100, ("Firefox", "128", "Windows", "11", "Desktop"), UTM_NONE, "Google", "Organic Search", "DE", "Berlin",
          "Berlin", "a", [(0, "pageview", "/", {})]),
    "B": (90, ("Firefox", "128", "Linux", None, "Laptop"), ("google", "cpc", "spring", "analytics", "ad1"), "Google",
          "Paid Search", "DE", "Bavaria", "Munich", "b", [(0, "pageview", "/blog/a", {})]),
    "C": (80, ("Safari", "17", "iOS", "17", "Mobile"), ("facebook", "social", "spring", None, None), "Facebook",
          "Organic Social", "FR", "Île-de-France", "Paris", "b",
          [(0, "pageview", "/", {}), (1, "pageview", "/pricing", {}), (2, "signup", "/pricing", {"plan": "free"})]),
    "D": (60, ("Chrome", "129", "Android", "14", "Mobile"), UTM_NONE, None, "Direct", "US", None, None, "b",
          [(0, "pageview", "/blog/a", {}), (1, "pageview", "/", {})]),
    "E": (30, ("Chrome", "130", "Mac OS X", "14", "Desktop"), UTM_NONE, "news.ycombinator.com", "Referral", "US",
          None, None, "a", [(0, "pageview", "/pricing", {}), (1, "signup", "/pricing", {"plan": "pro"})]),
    "P": (30 * 60, CHROME_WIN, UTM_NONE, None, "Direct", "DE", None, None, "a", [(0, "pageview", "/", {})]),
    "Q": (30 * 60 + 5, CHROME_WIN, UTM_NONE, None, "Direct", "DE", None, None, "b", [(0, "pageview", "/", {})]),
}


def seed(server: LiveServer, site_id: str, goals: bool = True) -> None:
    """Store the table above as events of the site (the mirror copies them to the analytics store), and
    the two goals unless `goals` is false."""
    now = datetime.now(UTC)
    records = []
    for visitor, (ago, device, utm, source, channel, country, region, city, variant, events) in VISITS.items():
        start = now - timedelta(minutes=ago)
        for after, name, path, props in events:
            ts = start + timedelta(minutes=after)
            records.append((
                new_id("evt"), None, "live", site_id, name, f"s{visitor}-{site_id}", {"variant": variant, **props},
                f"https://shop.example{path}", path, None, None, 1280, country, f"ip-{visitor}-{site_id}", ts, ts,
                *device, *utm, source, channel, region, city))

    async def store() -> None:
        async with server.app[POOL].acquire() as conn:
            workspace_id = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site_id)
            await events_store.ensure_partitions(conn, {r[14] for r in records})
            rows = [(r[0], workspace_id, *r[2:]) for r in records]
            await conn.copy_records_to_table("events", records=rows, columns=COLUMNS)
            for goal_type, column, value in (("event", "event_name", "signup"), ("page", "page_path", "/pricing"))[
                    :2 if goals else 0]:
                await conn.execute(f"INSERT INTO goals (id, site_id, goal_type, {column}) VALUES ($1, $2, $3, $4)",
                                   new_id("goal"), site_id, goal_type, value)

    server.run(store())


def panel(page: Page, name: str):
    return page.locator(f"[data-panel={name}]")


def expect_rows(page: Page, name: str, rows: list[tuple], metrics: tuple[str, ...] = ("visitors",)) -> None:
    """The panel shows exactly these rows: (label, value of each metric as displayed)."""
    p = panel(page, name)
    expect(p.locator("button.toprow .key")).to_have_text([r[0] for r in rows])
    for i, metric in enumerate(metrics):
        expect(p.locator(f"button.toprow [data-metric={metric}]")).to_have_text([r[1 + i] for r in rows])


def expect_stats(page: Page, visitors: str, pageviews: str, events: str, bounce: str) -> None:
    for stat, value in (("uniqueVisitors", visitors), ("totalPageviews", pageviews), ("totalEvents", events),
                        ("bounceRate", bounce)):
        expect(page.locator(f"[data-stat={stat}] .stat-value")).to_have_text(value)


def tab(page: Page, name: str, key: str) -> None:
    panel(page, name).locator(f"[data-tab='{key}']").click()
    expect(panel(page, name).locator(f"[data-tab='{key}']")).to_have_class(re.compile(r"\bactive\b"))


def expect_unfiltered(page: Page) -> None:
    expect_stats(page, "6", "9", "12", "50%")
    expect_rows(page, "sources", [("Organic Search", "2"), ("Direct", "1"), ("Organic Social", "1"),
                                  ("Paid Search", "1"), ("Referral", "1")])
    expect_rows(page, "pages", [("/", "4"), ("/pricing", "3"), ("/blog/a", "2")])
    expect_rows(page, "locations", [("Germany", "3"), ("United States", "2"), ("France", "1")])
    expect_rows(page, "devices", [("Chrome", "3"), ("Firefox", "2"), ("Safari", "1")])
    expect_rows(page, "goals", [("Visit /pricing", "3", "3", "50%"), ("signup", "3", "3", "50%")],
                ("visitors", "events", "conversion_rate"))


def shot(page: Page, path: Path) -> None:
    page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar stays on top of a full-page shot
    page.screenshot(path=path, full_page=True)


def open_site(page: Page, server: LiveServer, account: tuple[str, str], goals: bool = True) -> str:
    sign_in(page, server, account)
    site_id = add_site(page, f"panels-{secrets.token_hex(4)}.example.com")
    seed(server, site_id, goals)
    return site_id


def test_panels_show_exact_rows_and_rows_filter_everything(page: Page, live_server, account, screenshots: Path):
    site_id = open_site(page, live_server, account)
    overview = f"{live_server.base_url}/app/sites/{site_id}?range=24h"
    page.goto(overview)
    expect_unfiltered(page)
    expect(page.locator("[data-stat=avgSessionDuration] .stat-value")).to_have_text("1m 0s")

    # Every tab of every panel.
    tab(page, "sources", "source")
    expect_rows(page, "sources", [("Google", "3"), ("Facebook", "1"), ("news.ycombinator.com", "1")])
    for key, rows in (("utm_medium", [("cpc", "1"), ("social", "1")]),
                      ("utm_source", [("facebook", "1"), ("google", "1")]),
                      ("utm_campaign", [("spring", "2")]), ("utm_term", [("analytics", "1")]),
                      ("utm_content", [("ad1", "1")])):
        tab(page, "sources", key)
        expect_rows(page, "sources", rows)
    tab(page, "sources", "channel")
    tab(page, "pages", "entry_page")
    expect_rows(page, "pages", [("/", "3"), ("/blog/a", "2"), ("/pricing", "1")])
    tab(page, "pages", "exit_page")
    expect_rows(page, "pages", [("/pricing", "3"), ("/", "2"), ("/blog/a", "1")])
    tab(page, "pages", "page")
    tab(page, "locations", "region")
    expect_rows(page, "locations", [("Berlin", "2"), ("Bavaria", "1"), ("Île-de-France", "1")])
    tab(page, "locations", "city")
    expect_rows(page, "locations", [("Berlin", "2"), ("Munich", "1"), ("Paris", "1")])
    tab(page, "locations", "country")
    tab(page, "devices", "os")
    expect_rows(page, "devices", [("Windows", "2"), ("Android", "1"), ("Linux", "1"), ("Mac OS X", "1"), ("iOS", "1")])
    tab(page, "devices", "device")
    expect_rows(page, "devices", [("Desktop", "3"), ("Mobile", "2"), ("Laptop", "1")])
    tab(page, "devices", "browser")
    shot(page, screenshots / "panels.png")

    # A row click: a chip, a filter= term in the URL, and every panel and figure narrowed to Firefox (F, B).
    reads: list[str] = []
    page.on("request", lambda r: "/api/analytics/" in r.url and "/realtime" not in r.url and reads.append(r.url))
    panel(page, "devices").locator("button.toprow[data-key=Firefox]").click()
    expect(page).to_have_url(re.compile(r"[?&]filter=browser%3D%3DFirefox(&|$)"))
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Browser is Firefox"])
    expect_stats(page, "2", "2", "2", "100%")
    expect_rows(page, "sources", [("Organic Search", "1"), ("Paid Search", "1")])
    expect_rows(page, "pages", [("/", "1"), ("/blog/a", "1")])
    expect_rows(page, "locations", [("Germany", "2")])
    expect_rows(page, "devices", [("Firefox 128", "2")])  # a browser filter shows its versions
    expect_rows(page, "goals", [("Visit /pricing", "0", "0", "0%"), ("signup", "0", "0", "0%")],
                ("visitors", "events", "conversion_rate"))
    # Every read the click caused (overview, every panel) carried the filter.
    queries = [(urlsplit(u).path.rsplit("/", 1)[1], parse_qs(urlsplit(u).query)) for u in reads]
    assert sorted((path, q.get("property", [""])[0]) for path, q in queries) == [
        ("breakdown", "browser_version"), ("breakdown", "channel"), ("breakdown", "country"),
        ("breakdown", "goal"), ("breakdown", "page"), ("overview", "")]
    assert all(q["filter"] == ["browser==Firefox"] for _, q in queries), reads

    # A second row (a page) adds a second chip; both stay in the URL and survive a reload.
    panel(page, "pages").locator("button.toprow[data-key='/blog/a']").click()
    expect(page.locator(".chip")).to_have_count(2)
    expect_stats(page, "1", "1", "1", "100%")
    expect_rows(page, "sources", [("Paid Search", "1")])
    page.reload()
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Browser is Firefox", "Page is /blog/a"])
    expect_rows(page, "locations", [("Germany", "1")])
    expect_stats(page, "1", "1", "1", "100%")
    shot(page, screenshots / "panels-filtered.png")

    # Removing the chips restores the figures.
    page.locator(".chip", has_text="Page is /blog/a").locator("button").click()
    expect(page.locator(".chip")).to_have_count(1)
    expect_stats(page, "2", "2", "2", "100%")
    page.locator(".chip button").click()
    expect(page.locator(".chip")).to_have_count(0)
    assert "filter=" not in page.url
    expect_unfiltered(page)

    # Phone width: the panels stack and nothing overflows.
    page.set_viewport_size(PHONE)
    page.reload()
    expect_unfiltered(page)
    assert no_horizontal_overflow(page)
    shot(page, screenshots / "panels-phone.png")
    page.set_viewport_size(LAPTOP)


def test_a_shared_url_opens_filtered_and_the_comparison_shows_changes(page: Page, live_server, account,
                                                                       screenshots: Path):
    site_id = open_site(page, live_server, account)
    terms = "&".join("filter=" + quote(t) for t in ("country==DE", "channel==Organic Search", "page!=/blog/**"))
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h&{terms}")
    expect(page.locator(".chip > .ellipsis")).to_have_text(
        ["Country is Germany", "Channel is Organic Search", "Page is not /blog/**"])
    expect_stats(page, "2", "3", "4", "50%")  # A and F
    expect_rows(page, "pages", [("/", "2"), ("/pricing", "1")])
    expect_rows(page, "devices", [("Chrome", "1"), ("Firefox", "1")])
    expect_rows(page, "goals", [("Visit /pricing", "1", "1", "50%"), ("signup", "1", "1", "50%")],
                ("visitors", "events", "conversion_rate"))
    # The tabs carry the filters to the other pages of the site.
    expect(page.locator("nav.tabs a", has_text="Events")).to_have_attribute("href", re.compile("filter=country"))
    # Row clicks add terms beside those of the URL (an `is not` term and an `is` term of one dimension
    # combine); "Clear all" drops every term.
    panel(page, "devices").locator("button.toprow[data-key=Firefox]").click()
    expect(page.locator(".chip > .ellipsis")).to_have_count(4)
    expect_stats(page, "1", "1", "1", "100%")  # F
    tab(page, "devices", "browser")
    expect_rows(page, "devices", [("Firefox 128", "1")])
    panel(page, "pages").locator("button.toprow[data-key='/']").click()
    expect(page.locator(".chip > .ellipsis")).to_have_text(
        ["Country is Germany", "Channel is Organic Search", "Page is not /blog/**", "Browser is Firefox", "Page is /"])
    page.locator(".chips button", has_text="Clear all").click()
    expect(page.locator(".chip")).to_have_count(0)
    expect_unfiltered(page)

    # Comparison with the previous 24 hours (P and Q: two direct one-page visits in Germany).
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect_stats(page, "6", "9", "12", "50%")
    expect(page.locator(".stat-change")).to_have_count(0)
    page.locator("label.compare input").check()
    expect(page).to_have_url(re.compile(r"compare=previous_period"))
    for stat, text in (("uniqueVisitors", "+200% vs 2"), ("totalPageviews", "+350% vs 2"),
                       ("totalEvents", "+500% vs 2"), ("bounceRate", "\u221250 pts vs 100%"),
                       ("avgSessionDuration", "new vs 0s")):
        expect(page.locator(f"[data-stat={stat}] .stat-change")).to_have_text(text)
    expect(page.locator("[data-stat=bounceRate] .stat-change")).to_have_class(re.compile(r"\bgood\b"))
    expect(page.locator("[data-stat=uniqueVisitors] .stat-change")).to_have_class(re.compile(r"\bgood\b"))
    expect(page.locator(".chart .u-legend")).to_contain_text("Previous period")
    shot(page, screenshots / "compare.png")
    # The comparison follows the filters: in Germany, 3 visitors now against 2 before.
    panel(page, "locations").locator("button.toprow[data-key=DE]").click()
    expect(page.locator("[data-stat=uniqueVisitors] .stat-change")).to_have_text("+50% vs 2")
    # In France (C) the previous period had no visit, hence no bounce rate or visit duration: not "0%".
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h&compare=previous_period&filter=country%3D%3DFR")
    for stat, text in (("uniqueVisitors", "new vs 0"), ("bounceRate", "new vs \u2014"),
                       ("avgSessionDuration", "new vs \u2014")):
        expect(page.locator(f"[data-stat={stat}] .stat-change")).to_have_text(text)
    page.reload()
    expect(page.locator("label.compare input")).to_be_checked()
    page.locator("label.compare input").uncheck()
    expect(page.locator(".stat-change")).to_have_count(0)
    assert "compare=" not in page.url


def test_goal_drill_down_by_property(page: Page, live_server, account, screenshots: Path):
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    goals = panel(page, "goals")
    expect(goals.locator("[data-tab=props]")).to_have_count(0)
    goals.locator("button.toprow[data-key=signup]").click()
    expect(page).to_have_url(re.compile(r"filter=goal%3D%3Dsignup"))
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Goal is signup"])
    expect(page.locator("section.card h2", has_text="events")).to_have_text("“signup” events")
    expect_stats(page, "3", "0", "3", "33.3%")  # of A, C and E, only E's visit had one pageview
    # Only the chosen goal: A and C also visited /pricing, which a "Visit /pricing 0" row denied.
    expect_rows(page, "goals", [("signup", "3", "3", "50%")], ("visitors", "events", "conversion_rate"))
    expect_rows(page, "sources", [("Organic Search", "1"), ("Organic Social", "1"), ("Referral", "1")])

    # Properties of the goal's conversions: `plan` and `variant` (three each; the first by name is shown).
    tab(page, "goals", "props")
    picker = goals.locator("select.prop-picker")
    expect(picker.locator("option")).to_have_text(["plan", "variant"])
    expect_rows(page, "goals", [("pro", "2", "2", "100%"), ("free", "1", "1", "100%")],
                ("visitors", "events", "conversion_rate"))
    # Variant a: two of its three visitors signed up; variant b: one of three.
    picker.select_option("variant")
    expect_rows(page, "goals", [("a", "2", "2", "66.7%"), ("b", "1", "1", "33.3%")],
                ("visitors", "events", "conversion_rate"))
    shot(page, screenshots / "goals.png")
    goals.locator("button.toprow[data-key=a]").click()
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Goal is signup", "Property variant is a"])
    expect_stats(page, "2", "0", "2", "50%")
    expect_rows(page, "pages", [("/pricing", "2")])


def test_an_event_filter_charts_that_event(page: Page, live_server, account):
    """An Event chip (`filter=event==signup`, e.g. from a shared URL) charts that event, as a goal chip does:
    the chart counted every pageview under a "Pageviews" title, beside a headline of 0 pageviews."""
    site_id = open_site(page, live_server, account)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h&filter=" + quote("event==signup"))
    expect(page.locator(".chip > .ellipsis")).to_have_text(["Event is signup"])
    expect(page.locator("section.card h2", has_text="events")).to_have_text("\u201csignup\u201d events")
    expect_stats(page, "3", "0", "3", "33.3%")


def test_goals_are_managed_from_the_goals_panel(page: Page, live_server, account):
    site_id = open_site(page, live_server, account, goals=False)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    goals = panel(page, "goals")
    expect(goals.locator(".none")).to_contain_text("No goals yet.")
    goals.locator("button", has_text="Manage goals").click()
    manage = goals.locator(".goal-manage")
    expect(manage.locator("form.goal-form")).to_be_visible()
    page.wait_for_load_state("networkidle")  # the manager has listed the (no) goals
    # One empty state: the panel's, which says what a goal is; the manager's list adds none.
    expect(manage.locator(".goal-list li")).to_have_count(0)
    assert goals.inner_text().count("No goals yet") == 1, goals.inner_text()

    manage.locator("input[name=goal_value]").fill("signup")
    manage.locator("button[type=submit]").click()
    expect(manage.locator(".goal-list li")).to_have_text(["eventsignupRemove"])
    expect_rows(page, "goals", [("signup", "3", "3", "50%")], ("visitors", "events", "conversion_rate"))

    # A page goal must start with a slash: the API's message shows and nothing is added.
    manage.locator("select[name=goal_type]").select_option("page")
    manage.locator("input[name=goal_value]").fill("pricing")
    manage.locator("button[type=submit]").click()
    expect(manage.locator("[role=alert]")).to_have_text("page path must start with /")
    manage.locator("input[name=goal_value]").fill("/pri*")
    manage.locator("button[type=submit]").click()
    expect(manage.locator("[role=alert]")).to_be_hidden()
    expect(manage.locator(".goal-list li")).to_have_text(["eventsignupRemove", "page/pri*Remove"])
    expect_rows(page, "goals", [("Visit /pri*", "3", "3", "50%"), ("signup", "3", "3", "50%")],
                ("visitors", "events", "conversion_rate"))

    manage.get_by_role("button", name="Remove goal signup").focus()
    page.keyboard.press("Enter")
    expect(manage.locator(".goal-list li")).to_have_text(["page/pri*Remove"])
    # The keyboard keeps its place: focus goes to the next goal's Remove (it went to the top of the page).
    expect(manage.get_by_role("button", name="Remove goal Visit /pri*")).to_be_focused()
    expect_rows(page, "goals", [("Visit /pri*", "3", "3", "50%")], ("visitors", "events", "conversion_rate"))
    stored = page.request.get(f"{live_server.base_url}/api/sites/{site_id}/goals").json()["goals"]
    assert [(g["goal_type"], g["page_path"], g["event_name"]) for g in stored] == [("page", "/pri*", None)]


def test_panels_side_by_side_start_on_one_line(page: Page, live_server, account):
    # `section.card + section.card` gave every panel but the first a top margin, so Pages sat a margin
    # lower than Sources beside it (and shorter, the row being as tall as Sources).
    site_id = open_site(page, live_server, account, goals=False)
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect_rows(page, "pages", [("/", "4"), ("/pricing", "3"), ("/blog/a", "2")])
    boxes = {name: panel(page, name).bounding_box() for name in ("sources", "pages", "locations", "devices")}
    assert boxes["sources"]["y"] == boxes["pages"]["y"], boxes
    assert boxes["sources"]["height"] == boxes["pages"]["height"], boxes
    assert boxes["locations"]["y"] == boxes["devices"]["y"], boxes
    # The grid's own gap separates the rows, not the gap plus a margin.
    gap = page.locator(".panels").evaluate("el => parseFloat(getComputedStyle(el).rowGap)")
    assert boxes["locations"]["y"] - (boxes["sources"]["y"] + boxes["sources"]["height"]) == gap, boxes


def test_a_failed_values_check_asks_again_at_the_next_load(page: Page, live_server, account):
    """The Regions and Cities tabs show when the range has values of them (GET /api/analytics/has-values). A
    check that got no answer hid them for the range until it changed, as if there were none."""
    site_id = open_site(page, live_server, account)
    check = "**/api/analytics/has-values?*"
    page.route(check, lambda route: route.abort())
    page.goto(f"{live_server.base_url}/app/sites/{site_id}?range=24h")
    expect_rows(page, "locations", [("Germany", "3"), ("United States", "2"), ("France", "1")])
    expect(panel(page, "locations").locator("[data-tab=region]")).to_have_count(0)
    page.unroute(check)
    page.get_by_label("Compare to previous period").check()  # the next load of every panel, same range
    tab(page, "locations", "region")
    expect_rows(page, "locations", [("Berlin", "2"), ("Bavaria", "1"), ("Île-de-France", "1")])
