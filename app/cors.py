"""Origin checks and CORS headers for the ingestion endpoint.

A site accepts events from its registered domain and any subdomain of it. The page is identified by
the Origin header, or by the Referer when a browser sent no Origin. A request with neither is a
server-side sender and is not origin-checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from aiohttp import web
from yarl import URL

MAX_AGE = "86400"  # preflight cache: 24 hours
ALLOW_METHODS = "POST, OPTIONS"
ALLOW_HEADERS = "Content-Type"


@dataclass(frozen=True, slots=True)
class PageOrigin:
    origin: str | None  # the Origin header as sent, mirrored in Access-Control-Allow-Origin
    host: str | None  # lower-case ASCII host of the Origin or Referer; None if absent or opaque
    present: bool  # an Origin or Referer header was sent (a browser page)


@lru_cache(maxsize=1024)
def _host(value: str) -> str | None:
    """Cached: a site's pages send few distinct Origins, and parsing one costs more than the lookup."""
    try:
        url = URL(value)
    except (ValueError, TypeError):
        return None
    host = url.raw_host if url.absolute else None
    return host.lower().rstrip(".") if host else None


def page_origin(request: web.Request) -> PageOrigin:
    origin = request.headers.get("Origin")
    if origin:
        return PageOrigin(origin, _host(origin), True)
    referer = request.headers.get("Referer")
    if referer:
        return PageOrigin(None, _host(referer), True)
    return PageOrigin(None, None, False)


def host_matches(host: str | None, domain: str) -> bool:
    """The host is the registered domain or one of its subdomains (www. included)."""
    if not host:
        return False
    return host == domain or host.endswith("." + domain)


def candidate_domains(host: str) -> list[str]:
    """'a.b.example.com' -> ['a.b.example.com', 'b.example.com', 'example.com']: the registered
    domains that would allow this host."""
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)]


def mirror(origin: str | None) -> dict[str, str]:
    if not origin:
        return {}
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


def preflight_headers(origin: str) -> dict[str, str]:
    return {
        **mirror(origin),
        "Access-Control-Allow-Methods": ALLOW_METHODS,
        "Access-Control-Allow-Headers": ALLOW_HEADERS,
        "Access-Control-Max-Age": MAX_AGE,
    }
