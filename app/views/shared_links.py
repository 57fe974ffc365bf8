"""Shared links of a site (Plausible's): GET/POST /api/sites/{site_id}/shared-links, PATCH and DELETE …/{link_id},
and the read-only overview page they open, GET /share/{token} (with a password: a form first, answered by
POST /share/{token}, which sets the link's access cookie).

Managing links needs the dashboard session of the site's workspace (404 for any other site, as the goals
routes). The page needs no session: it is the dashboard's overview module in its shared mode, whose reads
carry `?auth=<token>` (app/shared_access.py). An unknown or revoked token's page is a 404."""

from __future__ import annotations

import asyncio
import html
import secrets
from typing import Any

from aiohttp import web

from app.appkeys import LIMITER, POOL, SETTINGS
from app.bodies import decode_site_json, read_site_body, read_site_form
from app.dashboard_session import check_password, hash_password
from app.input_rules import storable_text
from app.net import base_url, client_ip
from app.responses import SiteError, invalid_payload, iso_ms, issue, json_response
from app.shared_access import access_cookie, access_value, shared_link, unlocked
from app.views.pages import static_page
from app.views.sites import path_site
from storage import shared_links as store
from storage.ids import new_id

MAX_LINKS = 20  # per site
MAX_NAME = 64
MIN_PASSWORD, MAX_PASSWORD = 8, 128
DEFAULT_NAME = "Shared link"
BODY_LIMIT = 4096
ACCESS_MAX_AGE = 30 * 24 * 3600  # a password is asked again after 30 days
# Password attempts per client address (per second, per minute): the login's pace for one address.
PASSWORD_LIMITS = (10, 30)

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
# The password page posts its form to itself; everything else is as PAGE_HEADERS.
FORM_HEADERS = {**PAGE_HEADERS,
                "Content-Security-Policy": PAGE_HEADERS["Content-Security-Policy"].replace(
                    "form-action 'none'", "form-action 'self'")}
PASSWORD_PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content='width=device-width'>"
    "<meta name=robots content='noindex, nofollow'><title>{domain} · Tally</title>"
    "<link rel=stylesheet href=/static/css/app.css><body class=login-body><main class=login-card>"
    "<h1 class=brand>{domain}</h1><p class=muted>This shared dashboard asks for a password.</p>"
    "<form method=post><label>Password <input id=password name=password type=password required "
    "autocomplete=current-password autofocus></label>{error}<button type=submit class=primary>View dashboard"
    "</button></form></main></body></html>"
)
NOT_SHARED_PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Link not found</title>"
    "<main><h1>Link not found</h1><p>This link is wrong, or it is no longer shared.</p></main></html>"
)


def link_json(request: web.Request, row) -> dict:
    return {"id": row["id"], "name": row["name"], "url": f"{base_url(request)}/share/{row['token']}",
            "protected": row["password_hash"] is not None, "createdAt": iso_ms(row["created_at"])}


async def _fields(request: web.Request) -> dict[str, Any]:
    """The fields an optional JSON object body gives, checked: `name` (None or blank: the default name) and
    `password` (None: no password)."""
    raw = await read_site_body(request, BODY_LIMIT)
    if not raw.strip():
        return {}
    data: Any = decode_site_json(raw)
    if not isinstance(data, dict):
        raise invalid_payload([issue("", "expected a JSON object")])
    unknown = sorted(set(data) - {"name", "password"})
    if unknown:
        raise invalid_payload([issue(f, "unknown field") for f in unknown])
    name, password = data.get("name"), data.get("password")
    if name is not None and (not isinstance(name, str) or not storable_text(name) or len(name.strip()) > MAX_NAME):
        raise invalid_payload([issue("name", f"a string of at most {MAX_NAME} characters")])
    if password is not None and (not isinstance(password, str) or not storable_text(password)
                                 or not MIN_PASSWORD <= len(password) <= MAX_PASSWORD):
        raise invalid_payload([issue("password", f"a string of {MIN_PASSWORD} to {MAX_PASSWORD} characters")])
    if "name" in data:
        data["name"] = (name or "").strip() or DEFAULT_NAME
    return data


async def _password_hash(password: str | None) -> str | None:
    # argon2 is deliberately slow: off the event loop, as the sign-in's.
    return await asyncio.to_thread(hash_password, password) if password is not None else None


async def list_links(request: web.Request) -> web.Response:
    site = await path_site(request)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.list_links(conn, site["id"])
    return json_response({"links": [link_json(request, r) for r in rows]}, headers={"Cache-Control": "no-store"})


async def create_link(request: web.Request) -> web.Response:
    site = await path_site(request)
    fields = await _fields(request)
    name, password_hash = fields.get("name", DEFAULT_NAME), await _password_hash(fields.get("password"))
    async with request.config_dict[POOL].acquire() as conn, conn.transaction():
        await store.lock_site(conn, site["id"])  # two creations at once cannot pass the cap together
        if await store.count_links(conn, site["id"]) >= MAX_LINKS:
            raise SiteError(409, "too many shared links", limit=MAX_LINKS)
        row = await store.create_link(conn, new_id("shl"), site["id"], secrets.token_urlsafe(24), name,
                                      password_hash)
    return json_response(link_json(request, row), 201, headers={"Cache-Control": "no-store"})


async def update_link(request: web.Request) -> web.Response:
    """PATCH: rename the link, or set, change or (`"password": null`) remove its password. A new password
    ends the access every earlier one gave: their cookies sign the old hash."""
    site = await path_site(request)
    fields = await _fields(request)
    set_password = "password" in fields
    password_hash = await _password_hash(fields.get("password"))
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.update_link(conn, site["id"], request.match_info["link_id"], name=fields.get("name"),
                                      set_password=set_password, password_hash=password_hash)
    if row is None:
        raise SiteError(404, "not found")
    return json_response(link_json(request, row), headers={"Cache-Control": "no-store"})


async def delete_link(request: web.Request) -> web.Response:
    site = await path_site(request)
    link_id = request.match_info["link_id"]
    async with request.config_dict[POOL].acquire() as conn:
        deleted = await store.delete_link(conn, site["id"], link_id)
    if not deleted:
        raise SiteError(404, "not found")
    return json_response({"deleted": True})


async def share_page(request: web.Request) -> web.Response:
    """The overview page of a live link, naming its site in data attributes (the CSP allows no inline
    script); its script reads the token from the path. A link with a password shows its form until the
    access cookie is there."""
    link = await shared_link(request, request.match_info["token"])
    if link is None:
        return _not_shared()
    if not unlocked(request, link):
        return _password_page(link, 200)
    page = static_page("share.html").decode()
    page = page.replace("{{site_id}}", html.escape(link["site_id"])).replace("{{domain}}", html.escape(link["domain"]))
    return web.Response(text=page, content_type="text/html", headers=PAGE_HEADERS)


async def unlock(request: web.Request) -> web.Response:
    """POST /share/{token}: the password form. The right password sets the link's access cookie and goes
    back to the page (303); a wrong one shows the form again (401). Attempts are rate-limited per address."""
    link = await shared_link(request, request.match_info["token"])
    if link is None:
        return _not_shared()
    ip = client_ip(request, request.config_dict[SETTINGS].trusted_proxies)
    verdict = await request.config_dict[LIMITER].hit(f"share-password:{ip}", PASSWORD_LIMITS)
    if not verdict.allowed:
        raise SiteError(429, "too many password attempts", headers={"Retry-After": str(verdict.retry_after)})
    password = (await read_site_form(request, BODY_LIMIT)).get("password")
    response = web.Response(status=303, headers={"Location": f"/share/{link['token']}", "Cache-Control": "no-store"})
    if link["password_hash"] is not None:
        if not isinstance(password, str) or not await asyncio.to_thread(check_password, link["password_hash"],
                                                                         password):
            return _password_page(link, 401, "Wrong password.")
        response.set_cookie(access_cookie(link), access_value(request, link), max_age=ACCESS_MAX_AGE, path="/",
                            httponly=True, samesite="Lax", secure=base_url(request).startswith("https://"))
    return response


def _not_shared() -> web.Response:
    """The page of an unknown or revoked token."""
    return web.Response(status=404, text=NOT_SHARED_PAGE, content_type="text/html", headers=PAGE_HEADERS)


def _password_page(link, status: int, error: str = "") -> web.Response:
    body = PASSWORD_PAGE.format(domain=html.escape(link["domain"]),
                                error=f"<p class=error role=alert>{html.escape(error)}</p>" if error else "")
    return web.Response(status=status, text=body, content_type="text/html", headers=FORM_HEADERS)


def setup_shared_link_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/sites/{site_id}/shared-links", list_links)
    router.add_post("/sites/{site_id}/shared-links", create_link)
    router.add_patch("/sites/{site_id}/shared-links/{link_id}", update_link)
    router.add_delete("/sites/{site_id}/shared-links/{link_id}", delete_link)


def setup_share_page(router: web.UrlDispatcher) -> None:
    router.add_get("/share/{token}", share_page)
    router.add_post("/share/{token}", unlock)
