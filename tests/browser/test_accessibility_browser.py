"""Every dashboard page through Deque's axe-core rules engine, in a real headless Chromium, on a laptop and
a phone viewport, with realistic data: no violation of impact serious or critical, and no moderate or minor
one beyond those accepted in ACCEPTED by rule id and target, with the reason (none so far), so a new one fails.

axe-core comes from the npm registry, pinned by tests/browser/axe/package-lock.json (npm ci on first use, as
the Plausible and Segment tests get their packages); its script is evaluated in the page, which the pages'
Content-Security-Policy does not govern, so each page is audited under its own policy.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import site_pages
from tests.browser.conftest import LiveServer, npm_install, wait_for
from tests.browser.test_dashboard_browser import LAPTOP, PHONE, add_site, sign_in
from tests.browser.test_panels_browser import seed

AXE = Path(__file__).parent / "axe"
VIEWPORTS = (("laptop", LAPTOP), ("phone", PHONE))

# (rule id, target as axe prints it) -> why it is accepted. Only a moderate or minor violation may be: a
# serious or critical one fails whatever this says. Empty: every violation the first run found was fixed.
ACCEPTED: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def axe_source() -> str:
    npm_install(AXE, "axe-core")
    return (AXE / "node_modules" / "axe-core" / "axe.min.js").read_text()


def settled(page: Page) -> None:
    """Wait until nothing is loading and no transition runs: a panel fading in (.loading's opacity) would be
    measured at part of its contrast. Polled from here: page.wait_for_function re-evaluates its predicate with
    eval() inside the page, which the pages' `script-src 'self'` refuses whenever the first check is false."""
    wait_for(lambda: page.evaluate("!document.querySelector('.loading') && document.getAnimations().length === 0"),
             "the page to settle")


def violations(page: Page, axe_source: str) -> list[dict]:
    settled(page)
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source)
    result = page.evaluate("""async () => {
        const r = await axe.run(document, { resultTypes: ['violations'] })
        if (!r.passes.length) throw new Error('axe checked nothing')
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
          nodes: v.nodes.map((n) => ({ target: n.target.join(' '), impact: n.impact, summary: n.failureSummary })) }))
    }""")
    return result


def audit(page: Page, axe_source: str, where: str, found: list[str]) -> None:
    """Run axe on the page as it is; add each rule's unaccepted violations, one line per rule, to `found`."""
    for v in violations(page, axe_source):
        nodes = [n for n in v["nodes"]
                 if not ((v["id"], n["target"]) in ACCEPTED and (n["impact"] or v["impact"]) in ("moderate", "minor"))]
        if nodes:
            more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
            targets = ", ".join(n["target"] for n in nodes[:3]) + more
            found.append(f"{where}: {v['impact']} {v['id']} ({v['help']}) at {targets}: {nodes[0]['summary']!r}")


def each_viewport(page: Page, axe_source: str, name: str, url: str, ready: Callable[[Page], None],
                  found: list[str]) -> None:
    """Open `url` on a laptop, then on a phone, and audit it once `ready` has seen its data."""
    for label, size in VIEWPORTS:
        page.set_viewport_size(size)
        page.goto(url)
        ready(page)
        audit(page, axe_source, f"{name} ({label})", found)


def post_events(page: Page, server: LiveServer, site_id: str, events: list[tuple[str, str, str]]) -> None:
    for name, path, sid in events:
        resp = page.request.post(f"{server.base_url}/api/service/event", data={"s": site_id, "n": name, "p": path,
                                                                                "sid": sid})
        assert resp.status == 202


def signed_in_site(page: Page, live_server: LiveServer, account) -> str:
    """Signed in, with a verified site (the seeded events and goals, a few of them live) and a pending one."""
    sign_in(page, live_server, account)
    pending = f"pending-{secrets.token_hex(4)}.example.org"
    add_site(page, pending)
    domain = f"a11y-{secrets.token_hex(4)}.example.com"
    site_id = add_site(page, domain)
    card = page.locator("li.site", has_text=domain)
    site_pages.TXT_RECORDS[domain] = [card.locator(".verify .codeblock code").inner_text()]
    card.locator("button", has_text="Check DNS now").click()
    expect(card.locator(".badge")).to_have_text("✓ verified")
    seed(live_server, site_id)
    post_events(page, live_server, site_id, [("pageview", "/", "live1"), ("pageview", "/pricing", "live1"),
                                             ("signup", "/pricing", "live1"), ("pageview", "/blog/a", "live2")])
    events = f"{live_server.base_url}/api/analytics/events?siteId={site_id}&range=24h"
    wait_for(lambda: page.request.get(events).json()["total"] >= 16, "the seeded and live events")
    return site_id


def report(found: list[str]) -> None:
    assert found == [], "axe-core found:\n" + "\n".join(found)


def test_sign_in_page(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []

    def ready(p: Page) -> None:
        expect(p.locator("#email")).to_be_visible()

    each_viewport(page, axe_source, "sign-in", live_server.base_url + "/login", ready, found)
    page.fill("#email", account[0])
    page.fill("#password", "wrong password")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("Wrong email or password.")
    audit(page, axe_source, "sign-in with an error (phone)", found)
    report(found)


def test_sites_list(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    signed_in_site(page, live_server, account)

    def ready(p: Page) -> None:
        expect(p.locator("li.site")).to_have_count(2)
        expect(p.locator("li.site .badge.ok")).to_have_count(1)

    each_viewport(page, axe_source, "sites", live_server.base_url + "/app", ready, found)
    # A pending site's setup open: its snippet and DNS record.
    page.locator("li.site", has_text="pending-").get_by_role("button", name=re.compile("Set up & verify")).click()
    expect(page.locator("li.site .verify .codeblock")).to_be_visible()
    audit(page, axe_source, "sites with a setup open (phone)", found)
    report(found)


def test_overview_with_filters_and_comparison(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    site_id = signed_in_site(page, live_server, account)

    def ready(p: Page) -> None:
        expect(p.locator("[data-panel=pages] button.toprow").first).to_be_visible()
        expect(p.locator("[data-stat=uniqueVisitors] .stat-change")).to_be_visible()
        expect(p.locator(".chart canvas").first).to_be_visible()
        expect(p.locator(".live")).to_contain_text("current visitor")

    base = f"{live_server.base_url}/app/sites/{site_id}"
    each_viewport(page, axe_source, "overview", f"{base}?range=24h&compare=previous_period", ready, found)
    def filtered(p: Page) -> None:
        ready(p)
        # axe only asks for a review of a label on a plain div (which screen readers ignore): checked here.
        expect(p.get_by_role("group", name="Active filters").get_by_role("button")).to_have_count(4)

    each_viewport(page, axe_source, "overview filtered",
                  f"{base}?range=24h&compare=previous_period&filter=goal%3D%3Dsignup&filter=country%3D%3DDE&path=%2F",
                  filtered, found)
    # The goal's Properties tab, the goal manager and the shared links (one with a password) open.
    page.locator("[data-panel=goals] [data-tab=props]").click()
    expect(page.locator("[data-panel=goals] .prop-picker")).to_be_visible()
    page.get_by_role("button", name="Manage goals").click()
    expect(page.locator(".goal-list li")).to_have_count(2)
    page.click("details.shared-links summary")
    page.fill("input[name=link_name]", "Board")
    page.fill("input[name=link_password]", "correct horse 42")
    page.click("details.shared-links button[type=submit]")
    page.fill("input[name=link_name]", "Team")
    page.click("details.shared-links button[type=submit]")
    expect(page.locator("li.shared-link")).to_have_count(2)
    page.get_by_role("button", name="Password of Board").click()
    audit(page, axe_source, "overview with goals, properties and shared links open (phone)", found)
    page.set_viewport_size(LAPTOP)
    audit(page, axe_source, "overview with goals, properties and shared links open (laptop)", found)
    report(found)


def test_realtime_and_event_log(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    site_id = signed_in_site(page, live_server, account)
    base = f"{live_server.base_url}/app/sites/{site_id}"

    def realtime(p: Page) -> None:
        expect(p.locator(".feed li").first).to_be_visible()

    def log(p: Page) -> None:
        expect(p.locator("table.log tbody tr").first).to_be_visible()

    each_viewport(page, axe_source, "realtime", f"{base}/realtime?window=1800", realtime, found)
    each_viewport(page, axe_source, "event log", f"{base}/events?range=24h&limit=25", log, found)
    report(found)


def test_api_keys(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    sign_in(page, live_server, account, "/app/keys")
    for name in ("backend server", "old export job"):
        page.fill("input[name=name]", name)
        page.click("form.key-form button[type=submit]")
        expect(page.locator("table.keys tbody tr", has_text=name)).to_be_visible()
    page.locator("table.keys tr", has_text="old export job").get_by_role("button", name="Revoke").click()
    page.locator("table.keys tr", has_text="old export job").get_by_role("button", name="Confirm revoke").click()
    expect(page.locator("table.keys tr", has_text="old export job")).to_contain_text("revoked")
    expect(page.locator(".notice code")).to_be_visible()
    audit(page, axe_source, "API keys with a new key's value (laptop)", found)

    def ready(p: Page) -> None:
        expect(p.locator("table.keys tbody tr")).to_have_count(2)

    each_viewport(page, axe_source, "API keys", live_server.base_url + "/app/keys", ready, found)
    report(found)


def test_a_site_without_events(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    sign_in(page, live_server, account)
    site_id = add_site(page, f"empty-{secrets.token_hex(4)}.example.com")
    base = f"{live_server.base_url}/app/sites/{site_id}"

    def overview(p: Page) -> None:
        expect(p.locator(".empty .codeblock")).to_be_visible()
        expect(p.locator("[data-panel=goals] .none")).to_be_visible()

    def realtime(p: Page) -> None:
        expect(p.locator(".realtime .codeblock")).to_be_visible()

    def log(p: Page) -> None:
        expect(p.locator(".events .codeblock")).to_be_visible()

    each_viewport(page, axe_source, "empty overview", base, overview, found)
    each_viewport(page, axe_source, "empty realtime", f"{base}/realtime", realtime, found)
    each_viewport(page, axe_source, "empty event log", f"{base}/events", log, found)

    def missing(p: Page) -> None:
        expect(p.locator("h1")).to_have_text("Site not found")

    each_viewport(page, axe_source, "unknown site", f"{live_server.base_url}/app/sites/nope", missing, found)

    def no_route(p: Page) -> None:
        expect(p.locator("h1")).to_have_text("Page not found")

    each_viewport(page, axe_source, "unknown page", f"{live_server.base_url}/app/nope", no_route, found)
    report(found)


def test_a_shared_links_public_view_and_password_form(page: Page, browser: Browser, browser_context_args: dict,
                                                       live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    site_id = signed_in_site(page, live_server, account)
    urls = {}
    for name, password in (("Open", ""), ("Guarded", "correct horse 42")):
        resp = page.request.post(f"{live_server.base_url}/api/sites/{site_id}/shared-links",
                                 data={"name": name, **({"password": password} if password else {})})
        assert resp.status == 201, resp.text()
        urls[name] = resp.json()["url"]

    context = browser.new_context(**browser_context_args)
    try:
        shared = context.new_page()

        def view(p: Page) -> None:
            expect(p.locator("[data-panel=pages] button.toprow").first).to_be_visible()
            expect(p.locator(".live")).to_contain_text("current visitor")

        def form(p: Page) -> None:
            expect(p.locator("#password")).to_be_visible()

        each_viewport(shared, axe_source, "shared link", urls["Open"] + "?range=24h&compare=previous_period",
                      view, found)
        each_viewport(shared, axe_source, "shared link's password form", urls["Guarded"], form, found)
        shared.fill("#password", "wrong horse")
        shared.click("button[type=submit]")
        expect(shared.locator("[role=alert]")).to_have_text("Wrong password.")
        audit(shared, axe_source, "shared link's password form with an error (phone)", found)
        resp = shared.goto(live_server.base_url + "/share/no-such-token")
        assert resp is not None and resp.status == 404
        audit(shared, axe_source, "revoked shared link (phone)", found)
    finally:
        context.close()
    report(found)


def test_the_keyed_public_dashboard(page: Page, live_server: LiveServer, account, axe_source: str):
    found: list[str] = []
    base = live_server.base_url
    sign_in(page, live_server, account, "/app/keys")
    made = page.request.post(f"{base}/api/keys", data={"name": "share", "scopes": ["read", "write"]}).json()
    auth = {"Authorization": f"Bearer {made['key']}"}
    batch = [{"event": "signup", "user_id": f"u{i}", "properties": {"plan": plan}}
             for i, plan in enumerate(["pro", "pro", "free", "team", "free", "pro"])]
    assert page.request.post(f"{base}/v1/events/batch", headers=auth, data={"events": batch}).ok
    dashboard = page.request.post(f"{base}/v1/dashboards", headers=auth, data={
        "name": "Launch", "description": "Signups since the launch, by plan",
        "charts": [{"title": "Signups", "type": "line", "event": "signup"},
                   {"title": "Signups per day", "type": "bar", "event": "signup"},
                   {"title": "Plans", "type": "pie", "event": "signup", "group_by": "plan"}]}).json()
    shared = page.request.post(f"{base}/v1/dashboards/{dashboard['id']}/share", headers=auth).json()

    def ready(p: Page) -> None:
        expect(p.locator("#name")).to_have_text("Launch")
        expect(p.locator("#charts > *")).to_have_count(3)

    each_viewport(page, axe_source, "public dashboard", shared["public_url"], ready, found)
    assert page.request.delete(f"{base}/v1/dashboards/{dashboard['id']}/share", headers=auth).status == 204
    resp = page.goto(shared["public_url"])
    assert resp is not None and resp.status == 404
    audit(page, axe_source, "unshared public dashboard (phone)", found)
    report(found)
