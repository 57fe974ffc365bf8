"""Where data sources may connect: one policy, checked after DNS resolution, on every connection.

Rules (docs/decisions.md, "Data-source network policy"):
- never Tally's own infrastructure, in any mode: the PostgreSQL server it uses (DATABASE_URL or the
  embedded server), REDIS_URL's server and TALLY_ANALYTICS_URL's server, by address *and* port. When
  such a server is on loopback, its port is refused on every loopback, unspecified and own address.
- in production also loopback, link-local, private (RFC 1918, fc00::/7, 100.64/10), unspecified,
  multicast and reserved addresses, unless TALLY_SOURCES_ALLOW_HOSTS names the host or a CIDR holding
  the address (on-premises warehouses). Tally's own servers stay refused even then.
- IPv4-mapped, NAT64, 6to4 and Teredo IPv6 addresses are judged by the IPv4 address they carry.
- a name is refused when any address it resolves to is refused; callers then connect to the checked
  address itself, so a rebinding name cannot answer differently between check and connect.

A refusal raises DestinationRefused, whose text is always REFUSED: status_reason never says which
address a name resolved to or why, so it cannot be used to map the network.

API (connectors use these; every connector gets the app's guard as self.guard):
    NetGuard.from_settings(settings, database_dsn=None) -> NetGuard   # the runner builds one per app
    NetGuard.from_environment() -> NetGuard                           # same, from os.environ
    NetGuard.build(production=, own_services=[(host, port)], allow=[cidr or host]) -> NetGuard
    guard.allowed(host, address, port) -> bool                       # one resolved address
    await guard.resolve(host, port) -> list[str]                     # checked addresses, or raises
    guard.resolve_sync(host, port) -> list[str]                      # the same, blocking (for SDKs)
    guard.aiohttp_connector(**tcp_kwargs) -> aiohttp.TCPConnector    # every hop/redirect checked
    guard.requests_session() -> requests.Session                     # for requests-based vendor SDKs
    GuardedHTTPAdapter(guard)                                         # mount on your own Session
    guard.guard_pool_manager(urllib3.PoolManager) -> the same manager # for SDKs on urllib3 directly
    DestinationRefused (a SourceError), REFUSED (its fixed message), UNREACHABLE (generic connect text)
    canonical(address) -> IPv4Address | IPv6Address                  # the address a check judges
A connector that opens its own sockets resolves with guard.resolve() and connects to an address it
returned; on a connection error it raises SourceError(UNREACHABLE...) without the socket error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager, ProxyManager

from app.sources.base import SourceError
from storage.clickhouse import server_endpoint

if TYPE_CHECKING:
    import requests

    from app.settings import Settings

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
REFUSED = ("destination not allowed: data sources may not connect to this host "
           "(TALLY_SOURCES_ALLOW_HOSTS can allow on-premises hosts)")
UNREACHABLE = "could not connect to {host}:{port}"

# Beyond what ipaddress's is_* flags cover: carrier-grade NAT, which is_private misses on 3.11.
_EXTRA_INTERNAL = (ipaddress.ip_network("100.64.0.0/10"),)
# NAT64 prefixes (RFC 6052 well-known, RFC 8215 local-use): the last 32 bits are an IPv4 address.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_UNSPECIFIED = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))
_DEFAULT_PORTS = {"postgres": 5432, "postgresql": 5432, "redis": 6379, "rediss": 6379, "http": 80,
                  "https": 443, "clickhouse": 9000, "tcp": 9000}


class DestinationRefused(SourceError):
    """The policy refused every address of a destination (or one of them). Text is always REFUSED."""

    def __init__(self) -> None:
        super().__init__(REFUSED)


def canonical(address: str | IP) -> IP:
    """The address a check should judge: IPv4 for IPv4-mapped, 6to4 and Teredo IPv6 addresses."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if isinstance(ip, ipaddress.IPv6Address):
        if any(ip in net for net in _NAT64):
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


def internal(ip: IP) -> bool:
    """Not a public unicast address: loopback, link-local, private, unspecified, multicast, reserved."""
    return (ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_unspecified or ip.is_multicast
            or ip.is_reserved or not ip.is_global or any(ip in net for net in _EXTRA_INTERNAL))


def _getaddrinfo(host: str, port: int) -> list[str]:
    return sorted({info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})


def _own_addresses() -> set[IP]:
    """This machine's own addresses, best effort: a server bound to 0.0.0.0 answers on all of them."""
    found: set[IP] = set(_UNSPECIFIED)
    for name in {socket.gethostname(), socket.getfqdn()}:
        try:
            found.update(canonical(a) for a in _getaddrinfo(name, 0))
        except (OSError, ValueError):
            continue
    return found


def endpoint(url: str | None, default_port: int) -> tuple[str, int] | None:
    """(host, port) of a service URL; a Unix socket path or missing host counts as this machine."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme, default_port)
    except ValueError:
        return None
    host = parts.hostname or ""
    query_host = next((v for k, _, v in (p.partition("=") for p in parts.query.split("&")) if k == "host"), "")
    if not host or host.startswith("/") or query_host.startswith("/"):
        host = "localhost"
    return host, port


def analytics_endpoint(url: str | None) -> tuple[str, int] | None:
    """(host, port) of the analytics server, as the store's client reaches it (ClickHouse's HTTP ports)."""
    if not url:
        return None
    try:
        _, host, port = server_endpoint(url)
    except ValueError:
        return None
    return host, port


@dataclass(frozen=True)
class NetGuard:
    production: bool
    # (address, port) pairs of Tally's own servers: refused in every mode, allow-list or not.
    reserved: frozenset[tuple[IP, int]] = frozenset()
    # Ports of Tally's servers that listen on loopback: refused on every loopback address.
    reserved_loopback_ports: frozenset[int] = frozenset()
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    allow_hosts: frozenset[str] = field(default_factory=frozenset)

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def build(cls, *, production: bool, own_services: Iterable[tuple[str, int]],
              allow: Iterable[str] = ()) -> NetGuard:
        """own_services: (host, port) of every server Tally itself uses; resolved here, once."""
        reserved: set[tuple[IP, int]] = set()
        loopback_ports: set[int] = set()
        own: set[IP] | None = None
        for host, port in own_services:
            try:
                addresses = {canonical(a) for a in _getaddrinfo(host, port)}
            except (OSError, ValueError):
                addresses = set()
            if not addresses or any(a.is_loopback or a.is_unspecified for a in addresses):
                own = own if own is not None else _own_addresses()
                addresses |= own
                loopback_ports.add(port)
            reserved.update((a, port) for a in addresses)
        networks, hosts = [], set()
        for item in (a.strip() for a in allow):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                hosts.add(item.lower().rstrip("."))
        return cls(production, frozenset(reserved), frozenset(loopback_ports), tuple(networks), frozenset(hosts))

    @classmethod
    def from_settings(cls, settings: Settings, database_dsn: str | None = None) -> NetGuard:
        """database_dsn: the DSN actually in use (the embedded server's when DATABASE_URL is unset)."""
        services = [endpoint(database_dsn or settings.database_url, 5432), endpoint(settings.redis_url, 6379),
                    analytics_endpoint(settings.analytics_url or os.environ.get("TALLY_ANALYTICS_URL"))]
        return cls.build(production=settings.production, own_services=[s for s in services if s],
                         allow=getattr(settings, "sources_allow_hosts", ()))

    @classmethod
    def from_environment(cls) -> NetGuard:
        env = os.environ.get
        services = [endpoint(env("DATABASE_URL"), 5432), endpoint(env("REDIS_URL"), 6379),
                    analytics_endpoint(env("TALLY_ANALYTICS_URL"))]
        return cls.build(production=env("TALLY_ENV") == "production", own_services=[s for s in services if s],
                         allow=(env("TALLY_SOURCES_ALLOW_HOSTS") or "").split(","))

    # --- checks ----------------------------------------------------------------------------------
    def allowed(self, host: str, address: str | IP, port: int) -> bool:
        """May a source connect to `address` (one resolution of `host`) on `port`?"""
        try:
            ip = canonical(address)
        except ValueError:
            return False
        if (ip, port) in self.reserved or (ip.is_loopback and port in self.reserved_loopback_ports):
            return False
        if not self.production or not internal(ip):
            return True
        name = (host or "").lower().rstrip(".")
        return name in self.allow_hosts or any(ip in net for net in self.allow_networks)

    def check(self, host: str, addresses: Iterable[str], port: int) -> list[str]:
        addresses = list(addresses)
        if not addresses or not all(self.allowed(host, a, port) for a in addresses):
            raise DestinationRefused
        return addresses

    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address of host, checked; DestinationRefused if any is refused, or SourceError with
        UNREACHABLE's text if the name does not resolve (the resolver's error is not shown)."""
        try:
            addresses = await asyncio.get_running_loop().run_in_executor(None, _getaddrinfo, host, port)
        except (OSError, UnicodeError, ValueError):
            raise SourceError(UNREACHABLE.format(host=host, port=port)) from None
        return self.check(host, addresses, port)

    def resolve_sync(self, host: str, port: int) -> list[str]:
        try:
            addresses = _getaddrinfo(host, port)
        except (OSError, UnicodeError, ValueError):
            raise SourceError(UNREACHABLE.format(host=host, port=port)) from None
        return self.check(host, addresses, port)

    # --- HTTP clients ----------------------------------------------------------------------------
    def aiohttp_connector(self, **kwargs: Any) -> GuardedConnector:
        return GuardedConnector(self, **kwargs)

    def requests_session(self) -> requests.Session:
        import requests

        session = requests.Session()
        session.trust_env = False  # an environment proxy would be the peer the guard checks, not the host
        adapter = GuardedHTTPAdapter(self)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session

    def guard_pool_manager(self, manager: PoolManager) -> PoolManager:
        """Make every connection of a urllib3 PoolManager an SDK built (redirect hops to other hosts
        included) resolve, check and connect to the checked address, as GuardedHTTPAdapter does."""
        if isinstance(manager, ProxyManager):  # the proxy would be the peer checked, not the host
            raise TypeError("a ProxyManager cannot be guarded")
        manager.clear()  # pools opened before now would keep unguarded connection classes
        manager.pool_classes_by_scheme = guarded_pool_classes(self)
        return manager


# --- aiohttp ---------------------------------------------------------------------------------------

class GuardedResolver(AbstractResolver):
    """Resolves with aiohttp's default resolver, then refuses the name if any address is refused."""

    def __init__(self, guard: NetGuard, connector: GuardedConnector) -> None:
        self.guard = guard
        self.connector = connector
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        if not all(self.guard.allowed(host, r["host"], r["port"] or port) for r in results):
            self.connector.refused = True
            raise OSError("destination refused by policy")
        # Addresses approved under an allow-listed name; the socket factory sees only addresses.
        self.connector.approved.update((str(canonical(r["host"])), r["port"] or port) for r in results)
        return results

    async def close(self) -> None:
        await self.inner.close()


class GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector whose every socket is checked before it connects. Names go through
    GuardedResolver; addresses written as IP literals skip resolvers in aiohttp, so the socket factory
    checks the final address too (redirect hops included). `refused` tells a caller that a
    connection error was the policy's doing."""

    def __init__(self, guard: NetGuard, **kwargs: Any) -> None:
        self.guard = guard
        self.refused = False
        self.approved: set[tuple[str, int]] = set()
        kwargs.setdefault("use_dns_cache", False)  # each connection resolves and is checked afresh
        super().__init__(resolver=GuardedResolver(guard, self), socket_factory=self._socket, **kwargs)

    def _socket(self, addr_info: Any) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        address, port = str(canonical(sockaddr[0])), sockaddr[1]
        if not self.guard.allowed("", address, port) and (address, port) not in self.approved:
            self.refused = True
            raise OSError("destination refused by policy")
        return socket.socket(family=family, type=type_, proto=proto)


# --- requests / urllib3 ----------------------------------------------------------------------------

class _GuardedConnectionMixin:
    guard: NetGuard
    _dns_host: str
    port: int

    def _new_conn(self) -> socket.socket:
        # Connect to the checked address; TLS still uses self.host for SNI and certificate checks.
        name = self._dns_host
        address = self.guard.resolve_sync(name, self.port)[0]
        self._dns_host = address
        try:
            return super()._new_conn()  # type: ignore[misc]
        finally:
            self._dns_host = name


def guarded_pool_classes(guard: NetGuard) -> dict[str, type[HTTPConnectionPool]]:
    """urllib3 pool classes (for PoolManager.pool_classes_by_scheme) whose connections go through guard."""
    http = type("GuardedHTTPConnection", (_GuardedConnectionMixin, HTTPConnection), {"guard": guard})
    https = type("GuardedHTTPSConnection", (_GuardedConnectionMixin, HTTPSConnection), {"guard": guard})
    return {"http": type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http}),
            "https": type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https})}


class GuardedHTTPAdapter(HTTPAdapter):
    """A requests adapter whose connections resolve, check and then connect to the checked address.
    A refused destination raises DestinationRefused out of session.request()."""

    def __init__(self, guard: NetGuard, **kwargs: Any) -> None:
        self.guard = guard
        super().__init__(**kwargs)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = guarded_pool_classes(self.guard)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["guard"] = self.guard
        return state
