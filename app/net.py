"""The client's address and the service's root as the client sees it, trusting X-Forwarded-* only from
configured proxies."""

from __future__ import annotations

import ipaddress

from aiohttp import web

from app.appkeys import SETTINGS


def _trusted(remote: str, proxies: tuple[str, ...]) -> bool:
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    for proxy in proxies:
        try:
            if address in ipaddress.ip_network(proxy, strict=False):
                return True
        except ValueError:
            continue
    return False


def client_ip(request: web.Request, trusted_proxies: tuple[str, ...]) -> str:
    remote = request.remote or ""
    forwarded = request.headers.get("X-Forwarded-For")
    if forwarded and trusted_proxies and _trusted(remote, trusted_proxies):
        # The right-most address not added by one of our proxies is the client.
        for hop in reversed([h.strip() for h in forwarded.split(",") if h.strip()]):
            if not _trusted(hop, trusted_proxies):
                return hop
    return remote


def base_url(request: web.Request) -> str:
    """The service root as the caller sees it; X-Forwarded-Proto/Host only from trusted proxies."""
    scheme, host = request.scheme, request.host
    proxies = request.config_dict[SETTINGS].trusted_proxies
    if proxies and _trusted(request.remote or "", proxies):
        scheme = request.headers.get("X-Forwarded-Proto", scheme).split(",")[0].strip() or scheme
        host = request.headers.get("X-Forwarded-Host", host).split(",")[0].strip() or host
    return f"{scheme}://{host}"
