"""Reads through a site's shared link: `?auth=<token>` on the /api/analytics/* reads the overview makes,
instead of a dashboard session (Plausible's shared-link parameter).

A token reads its one site and only through handlers marked @shareable; the /api layer refuses the
parameter anywhere else (403), so the event log, the export and every write stay session-only. An unknown,
malformed or revoked token is the same 404 as another workspace's site. A link with a password also needs
its access cookie, which the link's page sets once the password is given (app/views/shared_links.py)."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from aiohttp import web

from app.appkeys import LIMITER, POOL, SETTINGS
from app.auth import Handler
from app.dashboard_session import current_account
from app.net import client_ip
from app.plans import ANONYMOUS
from app.responses import SiteError
from storage import shared_links as store

SHARE_PARAM = "auth"
TOKEN_FORMAT = re.compile(r"^[A-Za-z0-9_-]{16,64}\Z")


def shareable(handler: Handler) -> Handler:
    """Mark an /api read a shared link may make (it then authenticates through `reader`)."""
    handler.tally_shareable = True  # type: ignore[attr-defined]
    return handler


def refuse_token_elsewhere(request: web.Request) -> None:
    """The /api layer's rule: a shared-link token on a handler that is not @shareable is a 403, whether
    or not the caller also has a session, so a token never reaches a write, the event log or the export."""
    if SHARE_PARAM in request.query and not getattr(request.match_info.handler, "tally_shareable", False):
        raise SiteError(403, "a shared link cannot read this")


@dataclass(frozen=True, slots=True)
class Reader:
    workspace_id: int
    site_id: str | None  # the only site a shared link reads; None for a signed-in session


async def shared_link(request: web.Request, token: str):
    """The live link of a token (with its site's domain and workspace), or None."""
    if not TOKEN_FORMAT.match(token):
        return None
    async with request.config_dict[POOL].acquire() as conn:
        return await store.by_token(conn, token)


async def reader(request: web.Request) -> Reader:
    """Who reads: the signed-in session (401 without one), or, with `?auth=`, the shared link (404 when
    unknown or revoked). Token reads are rate-limited per client address like the public dashboards."""
    refuse_token_elsewhere(request)  # the /api layer's rule already; kept here so no caller can skip it
    token = request.query.get(SHARE_PARAM)
    if token is None:
        return Reader((await current_account(request)).workspace_id, None)
    ip = client_ip(request, request.config_dict[SETTINGS].trusted_proxies)
    verdict = await request.config_dict[LIMITER].hit(f"share:{ip}", ANONYMOUS)
    if not verdict.allowed:
        raise SiteError(429, "too many requests; retry later", headers=verdict.headers())
    link = await shared_link(request, token)
    if link is None:
        raise SiteError(404, "not found")
    if not unlocked(request, link):
        raise SiteError(401, "this shared link needs its password")
    return Reader(link["workspace_id"], link["site_id"])


def access_cookie(link) -> str:
    """The name of a password-protected link's access cookie (per link: several may be open at once)."""
    return f"tally_share_{link['id']}"


def access_value(request: web.Request, link) -> str:
    """The cookie's value: an HMAC of the token and the password's hash under the service's secret, so it
    proves the password was given without holding it, and dies with the link."""
    key = request.config_dict[SETTINGS].secret.encode()
    return hmac.new(key, f"tally-share:{link['token']}:{link['password_hash']}".encode(), hashlib.sha256).hexdigest()


def unlocked(request: web.Request, link) -> bool:
    """Whether the reader may see the link's site: always without a password, else with its access cookie."""
    if link["password_hash"] is None:
        return True
    given = request.cookies.get(access_cookie(link), "")
    return hmac.compare_digest(given, access_value(request, link))


def check_site(who: Reader, site_id: str) -> None:
    """A shared link reads its own site only: any other site id is the 404 of a site one cannot see."""
    if who.site_id is not None and site_id != who.site_id:
        raise SiteError(404, "not found")
