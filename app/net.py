"""The client's address, trusting X-Forwarded-For only from configured proxies."""

from __future__ import annotations

import ipaddress

from aiohttp import web


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
