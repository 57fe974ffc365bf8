"""Publicly shared dashboards: a read-only page and its JSON, reached by an unguessable token, no key.

An unknown or revoked token is a 404; the page is a static file that fetches its data from the
same path + /data, so revoking also stops an already open page at its next refresh."""

from __future__ import annotations

from aiohttp import web

from app.appkeys import LIMITER, POOL, SETTINGS
from app.net import client_ip
from app.plans import ANONYMOUS
from app.responses import ApiError, iso_ms, json_response, not_found
from app.shared_access import TOKEN_FORMAT
from app.views.analytics_params import analytics_store
from app.views.dashboards import chart_data_json, chart_json, data_range
from app.views.pages import static_page
from storage import dashboards as store

ASSETS = {
    "public_dashboard.js": "application/javascript",
    "public_dashboard.css": "text/css",
}

# The token is the only secret: keep it out of caches, search engines and Referer headers.
PRIVATE_HEADERS = {"Cache-Control": "no-store", "X-Robots-Tag": "noindex, nofollow", "Referrer-Policy": "no-referrer"}
PAGE_HEADERS = {
    **PRIVATE_HEADERS,
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
NOT_SHARED_PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Dashboard not found</title>"
    "<main><h1>Dashboard not found</h1><p>This link is wrong, or the dashboard is no longer shared.</p></main></html>"
)


async def _rate_limit(request: web.Request) -> None:
    """Without a key, public views are limited per client address like other anonymous requests."""
    ip = client_ip(request, request.config_dict[SETTINGS].trusted_proxies)
    verdict = await request.config_dict[LIMITER].hit(f"public:{ip}", ANONYMOUS)
    if not verdict.allowed:
        raise ApiError(429, "rate_limited", "too many requests; retry later", headers=verdict.headers())


async def _shared(conn, token: str):
    if not TOKEN_FORMAT.match(token):  # the shared links' format: secrets.token_urlsafe
        return None
    return await store.by_token(conn, token)


async def page(request: web.Request) -> web.Response:
    await _rate_limit(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await _shared(conn, request.match_info["token"])
    if row is None:
        return web.Response(status=404, text=NOT_SHARED_PAGE, content_type="text/html", headers=PAGE_HEADERS)
    return web.Response(body=static_page("public_dashboard.html"), content_type="text/html", charset="utf-8",
                        headers=PAGE_HEADERS)


async def page_data(request: web.Request) -> web.Response:
    """The dashboard (without its id or keyed details) and every chart's data over one range."""
    await _rate_limit(request)
    start, end, interval = data_range(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await _shared(conn, request.match_info["token"])
        if row is None:
            raise not_found("this dashboard does not exist or is no longer shared")
        charts = await store.charts_of(conn, row["id"])
    db = await analytics_store(request, row["workspace_id"])
    data = [await chart_data_json(db, row["workspace_id"], row["env"], c, start, end, interval) for c in charts]
    body = {
        "dashboard": {"name": row["name"], "description": row["description"],
                      "updated_at": iso_ms(row["updated_at"]), "charts": [chart_json(c) for c in charts]},
        "from": iso_ms(start), "to": iso_ms(end), "interval": interval, "data": data,
    }
    return json_response(body, headers=PRIVATE_HEADERS)


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise not_found("no such asset")
    return web.Response(body=static_page(name), content_type=ASSETS[name],
                        headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"})


def setup_public_dashboard_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/public/dashboards/{token}", page)
    router.add_get("/public/dashboards/{token}/data", page_data)
    router.add_get("/public/assets/{name}", asset)
