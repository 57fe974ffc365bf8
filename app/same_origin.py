"""Cross-site request refusal for the dashboard's state-changing /api routes.

A browser names the page that sent a request in Origin (and, in newer browsers, says cross-site in
Sec-Fetch-Site). A POST, PUT, PATCH or DELETE under /api/ whose Origin is not the dashboard's own
origin is refused before it reaches a handler, so a foreign page cannot sign someone in, add a site or
mint a key with their cookie. A request with no Origin and no Sec-Fetch-Site (curl, scripts) carries
no ambient browser cookie by accident and is accepted. Key-less ingestion (handlers marked
@ingestion) is exempt: any page may send events, and its own origin rules apply there. Applied by the
/api sub-application's layer only (app/middlewares.py).
"""

from __future__ import annotations

from aiohttp import web
from yarl import URL

from app.appkeys import SETTINGS
from app.net import _trusted
from app.responses import SiteError

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _authority(host: str, scheme: str) -> tuple[str, int | None]:
    """'Example.com:8000' -> ('example.com', 8000); the scheme's default port when none is given."""
    url = URL.build(scheme=scheme, authority=host) if host else None
    if url is None or not url.raw_host:
        return "", None
    return url.raw_host.lower().rstrip("."), url.port


def own_authority(request: web.Request, origin_scheme: str) -> tuple[str, int | None]:
    """The host and port the browser addressed: Host, or X-Forwarded-Host from a trusted proxy."""
    host = request.host
    forwarded = request.headers.get("X-Forwarded-Host")
    proxies = request.config_dict[SETTINGS].trusted_proxies
    if forwarded and proxies and _trusted(request.remote or "", proxies):
        host = forwarded.split(",")[0].strip()
    return _authority(host, origin_scheme)


def is_same_origin(request: web.Request, origin: str) -> bool:
    try:
        url = URL(origin)
    except (ValueError, TypeError):
        return False
    if url.scheme not in _DEFAULT_PORTS or not url.raw_host:
        return False  # "null" (sandboxed frames, privacy redirects) and anything odd
    return (url.raw_host.lower().rstrip("."), url.port) == own_authority(request, url.scheme)


def refuse_cross_origin(request: web.Request) -> None:
    """The 403 for a state-changing request from a foreign page (the caller exempts ingestion)."""
    if request.method in UNSAFE_METHODS:
        origin = request.headers.get("Origin")
        if origin is not None:
            if not is_same_origin(request, origin):
                raise SiteError(403, "cross-origin request refused")
        elif request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            raise SiteError(403, "cross-origin request refused")
