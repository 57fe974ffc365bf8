"""Shared links of a site (Plausible's): GET/POST /api/sites/{site_id}/shared-links, DELETE …/{link_id},
and the read-only overview page they open, GET /share/{token}.

Managing links needs the dashboard session of the site's workspace (404 for any other site, as the goals
routes). The page needs no session: it is the dashboard's overview module in its shared mode, whose reads
carry `?auth=<token>` (app/shared_access.py). An unknown or revoked token's page is a 404."""

from __future__ import annotations

import html
import secrets
from typing import Any

import orjson
from aiohttp import web

from app.appkeys import POOL
from app.bodies import read_site_body
from app.dashboard_session import current_account
from app.input_rules import storable_text
from app.net import base_url
from app.responses import SiteError, iso_ms, json_response
from app.shared_access import shared_link
from app.views.pages import STATIC_DIR
from storage import shared_links as store
from storage import sites as site_store
from storage.ids import new_id

MAX_LINKS = 20  # per site
MAX_NAME = 64
DEFAULT_NAME = "Shared link"
BODY_LIMIT = 4096

# The token is the secret: keep it out of caches, search engines and Referer headers (as the public
# dashboards do); the CSP is the dashboard's.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex, nofollow",
}
NOT_SHARED_PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Link not found</title>"
    "<h1>Link not found</h1><p>This link is wrong, or it is no longer shared.</p></html>"
)


def link_json(request: web.Request, row) -> dict:
    return {"id": row["id"], "name": row["name"], "url": f"{base_url(request)}/share/{row['token']}",
            "createdAt": iso_ms(row["created_at"])}


async def _own_site(request: web.Request):
    """The path's site when it is in the caller's workspace; the same 404 for an unknown site."""
    account = await current_account(request)
    site_id = request.match_info["site_id"]
    row = None
    if storable_text(site_id):
        async with request.config_dict[POOL].acquire() as conn:
            row = await site_store.site_by_id(conn, site_id)
    if row is None or row["workspace_id"] != account.workspace_id:
        raise SiteError(404, "not found")
    return row


async def _name(request: web.Request) -> str:
    """`name` from an optional JSON object body; empty or absent gives the default name."""
    raw = await read_site_body(request, BODY_LIMIT)
    if not raw.strip():
        return DEFAULT_NAME
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise SiteError(400, "invalid json") from None
    if not isinstance(data, dict):
        raise SiteError(400, "invalid payload", issues=[{"field": "", "message": "expected a JSON object"}])
    unknown = sorted(set(data) - {"name"})
    if unknown:
        raise SiteError(400, "invalid payload", issues=[{"field": f, "message": "unknown field"} for f in unknown])
    name = data.get("name")
    if name is None:
        return DEFAULT_NAME
    if not isinstance(name, str) or not storable_text(name) or len(name.strip()) > MAX_NAME:
        raise SiteError(400, "invalid payload",
                        issues=[{"field": "name", "message": f"a string of at most {MAX_NAME} characters"}])
    return name.strip() or DEFAULT_NAME


async def list_links(request: web.Request) -> web.Response:
    site = await _own_site(request)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.list_links(conn, site["id"])
    return json_response({"links": [link_json(request, r) for r in rows]}, headers={"Cache-Control": "no-store"})


async def create_link(request: web.Request) -> web.Response:
    site = await _own_site(request)
    name = await _name(request)
    async with request.config_dict[POOL].acquire() as conn, conn.transaction():
        await store.lock_site(conn, site["id"])  # two creations at once cannot pass the cap together
        if await store.count_links(conn, site["id"]) >= MAX_LINKS:
            raise SiteError(409, "too many shared links", limit=MAX_LINKS)
        row = await store.create_link(conn, new_id("shl"), site["id"], secrets.token_urlsafe(24), name)
    return json_response(link_json(request, row), 201, headers={"Cache-Control": "no-store"})


async def delete_link(request: web.Request) -> web.Response:
    site = await _own_site(request)
    link_id = request.match_info["link_id"]
    async with request.config_dict[POOL].acquire() as conn:
        deleted = await store.delete_link(conn, site["id"], link_id)
    if not deleted:
        raise SiteError(404, "not found")
    return json_response({"deleted": True})


async def share_page(request: web.Request) -> web.Response:
    """The overview page of a live link, naming its site in data attributes (the CSP allows no inline
    script); its script reads the token from the path."""
    link = await shared_link(request, request.match_info["token"])
    if link is None:
        return web.Response(status=404, text=NOT_SHARED_PAGE, content_type="text/html", headers=PAGE_HEADERS)
    page = (STATIC_DIR / "share.html").read_text()
    page = page.replace("{{site_id}}", html.escape(link["site_id"])).replace("{{domain}}", html.escape(link["domain"]))
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


def setup_shared_link_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/sites/{site_id}/shared-links", list_links)
    router.add_post("/sites/{site_id}/shared-links", create_link)
    router.add_delete("/sites/{site_id}/shared-links/{link_id}", delete_link)


def setup_share_page(router: web.UrlDispatcher) -> None:
    router.add_get("/share/{token}", share_page)
