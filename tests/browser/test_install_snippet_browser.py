"""The install help in a real headless Chromium, followed as a site owner would: the snippet and the custom
event example copied from the dashboard into a page of another origin, which calls the custom event while
parsing, before the deferred tracker has run. The event is stored with its props, and nothing throws (the
help used to suggest tally.track(...), undefined until the script had loaded)."""

from __future__ import annotations

import secrets
import time

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import DESKTOP_UA, LiveServer, customer_site, wait_for
from tests.browser.test_dashboard_browser import add_site, sign_in


def test_a_custom_event_sent_before_the_tracker_loads_is_stored(
    page: Page, browser: Browser, live_server: LiveServer, account
):
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"early-{secrets.token_hex(4)}.example.com")
    card = page.locator("li.site", has_text="early-")
    snippet = card.locator(".setup .codeblock code").first.inner_text()
    example = card.locator(".setup code.custom-event").inner_text()
    # The overview of a site without events offers the same.
    page.goto(f"{base}/app/sites/{site_id}")
    expect(page.locator(".empty .codeblock code")).to_have_text(snippet)
    expect(page.locator(".empty code.custom-event")).to_have_text(example)

    # As the help says for a test on localhost: data-allow-localhost="true".
    installed = snippet.replace(" data-site=", ' data-allow-localhost="true" data-site=')
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>Early</title>
{installed}
</head><body><h1>Landing</h1>
<script>
  window.trackerRanBefore = typeof window.tally.track === 'function'
  {example}
  window.queuedCalls = window.tally.q.length
</script>
</body></html>"""
    # A visitor of the site, in a browser of their own (no CDN header, which a cross-origin request may not add).
    context = browser.new_context(user_agent=DESKTOP_UA)
    visitor = context.new_page()
    errors: list[str] = []
    visitor.on("pageerror", lambda exc: errors.append(str(exc)))
    with customer_site(live_server, "/unused.js", "", {"/landing": html}) as site:
        visitor.goto(f"{site['base']}/landing")
        # The call was queued by the stub (the tracker had not run yet), and the tracker took the queue.
        assert visitor.evaluate("[window.trackerRanBefore, window.queuedCalls]") == [False, 1]
        visitor.wait_for_function("typeof window.tally === 'function' && !window.tally.q")
        log = f"{base}/api/analytics/events?siteId={site_id}&range=1h&limit=100"
        wait_for(lambda: len(page.request.get(log).json()["events"]) >= 2, "the queued event and the pageview")
        time.sleep(0.5)  # anything else had time to arrive
        events = page.request.get(log).json()["events"]
    assert sorted((e["name"], e["path"], e["props"]) for e in events) == [
        ("pageview", "/landing", {}),
        ("signup", "/landing", {"plan": "pro"}),
    ]
    context.close()
    assert errors == []


def test_pages_named_by_data_exclude_send_no_pageview(page: Page, browser: Browser, live_server: LiveServer, account):
    """Plausible's data-exclude on the script tag: a page matching a pattern sends no pageview (its custom events
    are sent, as in Plausible); the next page, which matches none, sends its pageview too."""
    base = live_server.base_url
    sign_in(page, live_server, account)
    site_id = add_site(page, f"exclude-{secrets.token_hex(4)}.example.com")
    tag = (f'<script defer src="{base}/tracker.js" data-site="{site_id}" data-allow-localhost="true" '
           'data-exclude="/admin/**, /preview/*"></script>')

    def html(title: str) -> str:
        return (f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>{tag}</head><body>'
                f"<script>window.addEventListener('load', () => tally('signup'))</script></body></html>")
    context = browser.new_context(user_agent=DESKTOP_UA)
    visitor = context.new_page()
    with customer_site(live_server, "/unused.js", "", {"/admin/users": html("Admin"), "/preview/a": html("Draft"),
                                                        "/shop": html("Shop")}) as site:
        for path in ("/admin/users", "/preview/a", "/shop"):
            visitor.goto(f"{site['base']}{path}")
            visitor.wait_for_function("typeof window.tally === 'function'")
        log = f"{base}/api/analytics/events?siteId={site_id}&range=1h&limit=100"
        wait_for(lambda: len(page.request.get(log).json()["events"]) >= 4, "the shop's pageview and three signups")
        time.sleep(0.5)  # anything else had time to arrive
        events = page.request.get(log).json()["events"]
    assert sorted((e["name"], e["path"]) for e in events) == [
        ("pageview", "/shop"), ("signup", "/admin/users"), ("signup", "/preview/a"), ("signup", "/shop")]
    context.close()
