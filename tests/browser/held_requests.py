"""Requests a browser test holds and answers late, to play a slow answer arriving after a newer one: hold the
first matching request, let the page go on, then answer it and let the page's handlers run."""

from __future__ import annotations

import json

from playwright.sync_api import Page, Route


def held_request(page: Page, pattern: str, method: str = "GET") -> list[Route]:
    """The first `method` request matching `pattern` is held until the test answers it; all others go."""
    held: list[Route] = []

    def hold(route: Route) -> None:
        if held or route.request.method != method:
            route.continue_()
        else:
            held.append(route)

    page.route(pattern, hold)
    return held


def wait_held(page: Page, held: list[Route]) -> Route:
    for _ in range(200):  # route handlers run while Playwright dispatches events
        if held:
            return held[0]
        page.wait_for_timeout(50)
    raise AssertionError("the request was not sent")


def settle(page: Page) -> None:
    """Let the page's handlers of an answer just given run."""
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")


def answer_late(page: Page, route: Route, pattern: str, body: dict | None = None) -> None:
    """Answer a held request (with `body` as JSON, else the server's own answer), then let the page handle it."""
    with page.expect_response(pattern):
        if body is None:
            route.continue_()
        else:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(body))
    settle(page)
