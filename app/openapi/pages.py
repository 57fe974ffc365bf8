"""The dashboard's HTML pages and the browser tracker script (static assets under /static are not listed)."""

from __future__ import annotations

from app.openapi.common import keyed_errors

_HTML = {"content": {"text/html": {"schema": {"type": "string"}}}}
_REDIRECT = {"description": "redirect", "headers": {"Location": {"schema": {"type": "string"}}}}
_PAGE = {"200": {"description": "HTML page", **_HTML}, "302": _REDIRECT}


def _page(summary: str) -> dict:
    return {"get": {"summary": summary, "responses": dict(_PAGE)}}


PATHS = {
    "/": {"get": {"summary": "Redirects to /app when signed in, else to /login", "responses": {"302": _REDIRECT}}},
    "/login": _page("Dashboard sign-in page (redirects to /app when already signed in)"),
    "/app": _page("Dashboard (redirects to /login when signed out)"),
    # The route's pattern is aiohttp's `.*`, which stops at a line break: such a tail has no route (404).
    "/app/{tail}": {"get": {
        "summary": "Dashboard page, routed in the browser",
        "parameters": [{"name": "tail", "in": "path", "required": True,
                        "schema": {"type": "string", "minLength": 1, "pattern": "^[^\\n]+$"}}],
        "responses": {**_PAGE, **keyed_errors(404)}}},
    "/tracker.js": {"get": {
        "summary": "The browser tracker script",
        "description": "Cache-Control public, max-age=86400 (a year, immutable, with ?v=<version>); strong ETag; "
                       "If-None-Match gives 304; gzip when accepted.",
        "parameters": [{"name": "v", "in": "query", "required": False, "schema": {"type": "string"}}],
        "responses": {
            "200": {"description": "JavaScript", "headers": {"ETag": {"schema": {"type": "string"}}},
                    "content": {"application/javascript": {"schema": {"type": "string"}}}},
            "304": {"description": "not modified"},
        },
    }},
}
SCHEMAS: dict = {}
