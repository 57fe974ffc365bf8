"""The dashboard's HTML pages and static assets.

The dashboard is plain HTML, CSS and ES modules under app/static (no build step at run time). `/app/...`
is one shell page whose script routes on the path; the server checks the session first so a signed-out
visitor lands on the login page instead of a flash of an empty dashboard.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from urllib.parse import quote

from aiohttp import web
from aiohttp_session import get_session

from app.views.tracker import tracker_js

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

# Only this origin's scripts, styles and API; uPlot sizes elements through the CSSOM, which CSP allows.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@cache
def static_page(name: str) -> bytes:
    """A page of app/static, read once per process."""
    return (STATIC_DIR / name).read_bytes()


def _html(name: str) -> web.Response:
    return web.Response(body=static_page(name), content_type="text/html", charset="utf-8", headers=SECURITY_HEADERS)


async def _signed_in(request: web.Request) -> bool:
    session = await get_session(request)
    return isinstance(session.get("account_id"), int)


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/app" if await _signed_in(request) else "/login")


async def login_page(request: web.Request) -> web.Response:
    if await _signed_in(request):
        raise web.HTTPFound("/app")
    return _html("login.html")


async def app_page(request: web.Request) -> web.Response:
    if not await _signed_in(request):
        raise web.HTTPFound("/login?next=" + quote(request.path_qs, safe="/?=&"))
    return _html("app.html")


def setup_page_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", root)
    router.add_get("/login", login_page)
    router.add_get("/app", app_page)
    router.add_get("/app/{tail:.+}", app_page)
    router.add_get("/tracker.js", tracker_js)
    # Only the asset folders: package.json and the vendoring script beside them are not served.
    for folder in ("css", "js", "vendor"):
        router.add_static(f"/static/{folder}", STATIC_DIR / folder)
