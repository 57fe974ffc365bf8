"""What the server adds to a site event: the hashed IP, the country, the visitor key for sessions.

Privacy: the raw IP and User-Agent are never stored. `ip_hash` uses a fixed salt derived from the
server secret (so the same visitor hashes alike across days); the visitor key used for session
assignment uses a random salt that rotates every UTC day and is never written to disk.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from datetime import date

from multidict import CIMultiDictProxy
from redis.asyncio import Redis

from common.outages import REDIS_UNREACHABLE, DependencyDown, Outages, ask_redis

log = logging.getLogger("tally.enrich")

# CDN and edge headers carrying the visitor's ISO 3166-1 alpha-2 country, most common first.
COUNTRY_HEADERS = (
    "CF-IPCountry",
    "CloudFront-Viewer-Country",
    "X-Vercel-IP-Country",
    "Fastly-Client-Country",
    "X-Country-Code",
    "X-Appengine-Country",
    "X-Geo-Country",
    "X-Client-Geo-Country",
)
# XX: unknown, T1: Tor (Cloudflare); neither is a country.
NOT_COUNTRIES = frozenset({"XX", "T1", "ZZ", "A1", "A2", "O1", "EU", "AP"})
_ALPHA2 = re.compile(r"^[A-Za-z]{2}\Z")


def ip_salt(secret: str) -> bytes:
    return hashlib.sha256(b"tally-ip-hash:" + secret.encode()).digest()


def ip_hash(salt: bytes, ip: str) -> str:
    """First 16 hex characters of SHA-256(salt + IP)."""
    return hashlib.sha256(salt + ip.encode()).hexdigest()[:16]


def _country_code(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    if not _ALPHA2.match(value):
        return None
    code = value.upper()
    return None if code in NOT_COUNTRIES else code


def country_from_headers(headers: CIMultiDictProxy[str]) -> str | None:
    for name in COUNTRY_HEADERS:
        code = _country_code(headers.get(name))
        if code:
            return code
    return None


class GeoIP:
    """Optional MaxMind (GeoLite2/GeoIP2 Country or City) lookup. The country is used when no CDN header
    gives one; a City database also gives the region (first subdivision) and city, in English."""

    def __init__(self, path: str) -> None:
        import maxminddb

        self._reader = maxminddb.open_database(path)
        self.has_cities = "City" in self._reader.metadata().database_type

    def _record(self, ip: str) -> dict | None:
        try:
            record = self._reader.get(ip)
        except ValueError:  # not an IP address (e.g. a unix socket peer)
            return None
        return record if isinstance(record, dict) else None

    def country(self, ip: str) -> str | None:
        record = self._record(ip)
        return _record_country(record) if record is not None else None

    def locate(self, ip: str, country: str | None) -> tuple[str | None, str | None, str | None]:
        """(country, region, city): the country given (from a CDN header) or the database's; region and
        city only from a City database, and only when its country agrees with the one returned."""
        record = self._record(ip)
        if record is None:
            return country, None, None
        found = _record_country(record)
        if country is None:
            country = found
        if not self.has_cities or found is None or found != country:
            return country, None, None
        subdivisions = record.get("subdivisions")
        region = _english(subdivisions[0]) if isinstance(subdivisions, list) and subdivisions else None
        return country, region, _english(record.get("city"))

    def close(self) -> None:
        self._reader.close()


def _record_country(record: dict) -> str | None:
    for key in ("country", "registered_country"):
        entry = record.get(key)
        if isinstance(entry, dict):
            code = _country_code(entry.get("iso_code"))
            if code:
                return code
    return None


def _english(entry: object) -> str | None:
    names = entry.get("names") if isinstance(entry, dict) else None
    name = names.get("en") if isinstance(names, dict) else None
    return name[:128] if isinstance(name, str) and name and "\x00" not in name else None


def open_geoip(path: str | None) -> GeoIP | None:
    if not path:
        return None
    try:
        return GeoIP(path)
    except (OSError, ValueError) as exc:
        # A missing or corrupt database must not stop ingestion; countries then come from headers only.
        log.error("cannot open TALLY_GEOIP_DB path=%s error=%s", path, exc)
        return None


class DailySalt:
    """A random salt per UTC day. With Redis all processes share it (first writer wins); it expires
    after two days so yesterday's visitor keys become unlinkable. While Redis is unreachable this
    process uses a salt of its own for the day (a fallback, counted), and asks Redis again next time."""

    def __init__(self, redis: Redis | None, outages: Outages) -> None:
        self._redis = redis
        self._outages = outages
        self._day: date | None = None
        self._salt = b""
        self._own: tuple[date, bytes] | None = None  # the fallback salt, never shared

    async def get(self, day: date) -> bytes:
        if day == self._day:
            return self._salt
        salt = secrets.token_bytes(32)
        if self._redis is not None:
            try:
                # Bounded like every Redis call on a request's way: a stalled Redis held the first event of
                # the day for the client's 5 s socket timeout.
                salt = await ask_redis(self._outages, self._shared(day, salt))
            except DependencyDown:  # down, and asked within the last PROBE_SECONDS
                self._outages.fallback("salt", None)
                return self._own_salt(day, salt)
            except REDIS_UNREACHABLE as exc:  # a timeout too
                self._outages.fallback("salt", exc)
                return self._own_salt(day, salt)
        self._day, self._salt = day, salt
        return salt

    async def _shared(self, day: date, salt: bytes) -> bytes:
        """The day's salt in Redis: `salt` unless another process set one first."""
        assert self._redis is not None
        key = f"tally:visitor-salt:{day.isoformat()}"
        await self._redis.set(key, salt, nx=True, ex=2 * 86400)
        return await self._redis.get(key) or salt

    def _own_salt(self, day: date, salt: bytes) -> bytes:
        """This process's salt of the day while Redis is down (the first one drawn that day)."""
        if self._own is None or self._own[0] != day:
            self._own = (day, salt)
        return self._own[1]


def visitor_key(salt: bytes, site_id: str, ip: str, user_agent: str) -> str:
    """Identifies a visitor for one day without storing who they are."""
    data = b"\0".join((salt, site_id.encode(), ip.encode(), user_agent.encode("utf-8", "replace")))
    return hashlib.sha256(data).hexdigest()[:32]
