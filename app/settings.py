"""Configuration, read once from the environment.

Each setting is declared once: its type, its default and the environment variable that sets it (every
one is listed in the README's configuration table). from_env() parses only what is set and non-empty,
so the defaults below are the only defaults."""

from __future__ import annotations

import ipaddress
import math
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from app.input_rules import HOST_NAME


class ConfigError(RuntimeError):
    pass


def _int(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


def _float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from exc
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {raw!r}")
    return value


def _text(name: str, raw: str) -> str:
    return raw


_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _flag(name: str, raw: str) -> bool:
    """A switch: any other word is refused (`off` used to mean on, as every word but 0, false and no did)."""
    value = _FLAGS.get(raw.strip().lower())
    if value is None:
        raise ConfigError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {raw!r}")
    return value


def _csv(name: str, raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _networks(name: str, raw: str) -> tuple[str, ...]:
    """Addresses or CIDRs. An entry that is neither used to be skipped on every request, silently."""
    entries = _csv(name, raw)
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ConfigError(f"{name}: {entry!r} is not an IP address or network (CIDR)") from None
    return entries


def _hosts_or_networks(name: str, raw: str) -> tuple[str, ...]:
    """CIDRs, addresses or host names. An entry that was none (`10.0.0/8`, a URL) was kept as a host name that
    no host has, and what it meant stayed refused."""
    entries = _csv(name, raw)
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            if "/" in entry or not HOST_NAME.match(entry) or entry.replace(".", "").isdigit():
                raise ConfigError(
                    f"{name}: {entry!r} is neither a network (CIDR), an IP address nor a host name") from None
    return entries


# The analytics store's rule for its database and cluster names (storage.clickhouse._NAME).
_CLICKHOUSE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def _clickhouse_name(name: str, raw: str) -> str:
    if not _CLICKHOUSE_NAME.match(raw):
        raise ConfigError(f"{name} must be a ClickHouse name (letters, digits and _, not starting with a digit), "
                          f"got {raw!r}")
    return raw


def _micros_as_ms(name: str, raw: str) -> float:
    return _int(name, raw) / 1000


def _parsed_url(name: str, raw: str):
    try:
        parsed = urlparse(raw)
        parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"{name} is not a valid URL (its port?)") from None
    return parsed


def _url(example: str, schemes: tuple[str, ...] = ()) -> Callable[[str, str], str]:
    """A server's URL: a scheme (one of `schemes`, if given) and a host, and a numeric port if any. The value
    is not repeated in the message, since it may carry a password."""

    def parse(name: str, raw: str) -> str:
        parsed = _parsed_url(name, raw)
        if not parsed.scheme or not parsed.hostname:
            raise ConfigError(f"{name} must be a URL with a scheme and a host, e.g. {example}")
        if schemes and parsed.scheme not in schemes:
            raise ConfigError(f"{name} must start with {' or '.join(s + '://' for s in schemes)}")
        return raw

    return parse


_DOH_URL = _url("https://cloudflare-dns.com/dns-query", ("http", "https"))
_SMTP_URL = _url("smtp://user:password@mail.example.com:587", ("smtp", "smtps"))


def _redis_url(name: str, raw: str) -> str:
    """What redis-py takes, checked before start: it raised a ValueError from deep in start-up for another
    scheme, and read a database that is not a number as database 0."""
    parsed = _parsed_url(name, raw)
    if parsed.scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{name} must be a redis://, rediss:// or unix:// URL")
    databases = parse_qs(parsed.query).get("db", [])
    if parsed.scheme != "unix" and parsed.path.strip("/"):
        databases.append(parsed.path.strip("/"))
    for database in databases:
        if not database.isdigit():
            raise ConfigError(f"{name} names database {database!r}: a database is a number")
    return raw


def _env_name(name: str, raw: str) -> str:
    if raw not in ("development", "production"):
        raise ConfigError("TALLY_ENV must be 'development' or 'production'")
    return raw


def var(name: str, parse: Callable[[str, str], Any] = _text, minimum: float | None = None, *,
        low: float | None = None, high: float | None = None, above: float | None = None) -> dict:
    """Field metadata: the variable that sets this setting, its parser, a floor (values below it are
    raised to it), and bounds: a value below `low`, above `high` or not above `above` is refused with a
    ConfigError (counts, sizes and timeouts that mean nothing at 0 or below, the port's range)."""
    return {"setting": {"env": name, "parse": parse, "minimum": minimum, "low": low, "high": high, "above": above}}


def _check_bounds(spec: dict, raw: str, value: Any) -> None:
    low, high, above = spec["low"], spec["high"], spec["above"]
    if low is not None and high is not None and not low <= value <= high:
        raise ConfigError(f"{spec['env']} must be between {low:g} and {high:g}, got {raw!r}")
    if low is not None and value < low:
        raise ConfigError(f"{spec['env']} must be at least {low:g}, got {raw!r}")
    if high is not None and value > high:
        raise ConfigError(f"{spec['env']} must be at most {high:g}, got {raw!r}")
    if above is not None and value <= above:
        raise ConfigError(f"{spec['env']} must be greater than {above:g}, got {raw!r}")


@dataclass(frozen=True)
class Settings:
    database_url: str | None = field(default=None, metadata=var("DATABASE_URL"))
    redis_url: str | None = field(default=None, metadata=var("REDIS_URL", _redis_url))
    env: str = field(default="development", metadata=var("TALLY_ENV", _env_name))
    secret: str = field(default="", metadata=var("TALLY_SECRET"))
    data_dir: Path = field(default=Path(".tally-data"), metadata=var("TALLY_DATA_DIR", lambda _, raw: Path(raw)))
    host: str = field(default="0.0.0.0", metadata=var("HOST"))
    port: int = field(default=8000, metadata=var("PORT", _int, low=1, high=65535))
    trusted_proxies: tuple[str, ...] = field(default=(), metadata=var("TALLY_TRUSTED_PROXIES", _networks))
    # Actor tuning: batch size cap, linger before a flush, mailbox bound (events), flushes at once.
    batch_max: int = field(default=5000, metadata=var("TALLY_BATCH_MAX", _int, low=1))
    batch_linger_ms: float = field(default=0.0, metadata=var("TALLY_BATCH_LINGER_US", _micros_as_ms, low=0))
    mailbox_events: int = field(default=50000, metadata=var("TALLY_MAILBOX_EVENTS", _int, low=1))
    flushes_in_flight: int = field(default=3, metadata=var("TALLY_FLUSHES_IN_FLIGHT", _int, 1))
    # An event not committed this long after its request queued it is answered 503 with Retry-After (a table
    # locked, a PostgreSQL stopped: requests otherwise waited for asyncpg's 60 s command timeout, then a 500).
    commit_timeout_seconds: float = field(default=10.0,
                                          metadata=var("TALLY_COMMIT_TIMEOUT_SECONDS", _float, above=0))
    # A request's PostgreSQL query, or its wait for a connection of the main pool, that takes longer is answered
    # 503 with Retry-After (PostgreSQL stalled: requests waited for asyncpg's 60 s command timeout, then a 500).
    db_request_timeout_seconds: float = field(default=10.0,
                                              metadata=var("TALLY_DB_REQUEST_TIMEOUT_SECONDS", _float, above=0))
    actor_idle_seconds: float = field(default=300.0, metadata=var("TALLY_ACTOR_IDLE_SECONDS", _float, 0.1))
    key_cache_seconds: float = field(default=2.0, metadata=var("TALLY_KEY_CACHE_SECONDS", _float, 0))
    pool_max: int = field(default=10, metadata=var("TALLY_DB_POOL_MAX", _int, low=1))
    # The actors' writes get a pool of their own (storage.db.create_writer_pool): two actors' flush slots at
    # the default TALLY_FLUSHES_IN_FLIGHT, so a busy tenant cannot take every writer connection either.
    write_pool_max: int = field(default=6, metadata=var("TALLY_DB_WRITE_POOL_MAX", _int, 1))
    # Heavy reads get their own small pool so they cannot starve ingestion, /readyz or other tenants.
    report_pool_max: int = field(default=3, metadata=var("TALLY_REPORT_POOL_MAX", _int, 1))
    # Event exports: at once per signed-in account, and how long one write may wait for a slow reader.
    exports_per_account: int = field(default=2, metadata=var("TALLY_EXPORTS_PER_ACCOUNT", _int, 1))
    export_write_timeout_seconds: float = field(default=30.0,
                                                metadata=var("TALLY_EXPORT_WRITE_TIMEOUT_SECONDS", _float, above=0))
    # A request body must have arrived this long after the handler starts reading it, else 408 (slow clients
    # would otherwise hold a connection, and a file descriptor, for as long as they like).
    body_timeout_seconds: float = field(default=60.0, metadata=var("TALLY_BODY_TIMEOUT_SECONDS", _float, above=0))
    access_log: bool = field(default=True, metadata=var("TALLY_ACCESS_LOG", _flag))
    # Tests turn the timers off and call Scheduler.run_now() instead.
    run_scheduler: bool = field(default=True, metadata=var("TALLY_RUN_SCHEDULER", _flag))
    # Site ingestion: events per minute per site and per visitor IP (0 disables), DNS-over-HTTPS
    # resolver for domain verification, optional MaxMind country database.
    site_events_per_min: int = field(default=60_000, metadata=var("TALLY_SITE_EVENTS_PER_MIN", _int, low=0))
    ip_events_per_min: int = field(default=600, metadata=var("TALLY_IP_EVENTS_PER_MIN", _int, low=0))
    doh_url: str = field(default="https://cloudflare-dns.com/dns-query", metadata=var("TALLY_DOH_URL", _DOH_URL))
    geoip_db: str | None = field(default=None, metadata=var("TALLY_GEOIP_DB"))
    # Reports: synchronous run timeout; custom SQL's own timeout and row cap; SMTP for scheduled delivery.
    report_timeout_seconds: float = field(default=30.0, metadata=var("TALLY_REPORT_TIMEOUT_SECONDS", _float, above=0))
    custom_sql_timeout_seconds: float = field(default=5.0,
                                              metadata=var("TALLY_CUSTOM_SQL_TIMEOUT_SECONDS", _float, 0.1))
    custom_sql_max_rows: int = field(default=10_000, metadata=var("TALLY_CUSTOM_SQL_MAX_ROWS", _int, 1))
    custom_sql_max_bytes: int = field(default=8 * 1024 * 1024,
                                      metadata=var("TALLY_CUSTOM_SQL_MAX_BYTES", _int, 1024))
    smtp_url: str | None = field(default=None, metadata=var("TALLY_SMTP_URL", _SMTP_URL))
    smtp_from: str = field(default="Tally Reports <reports@tally.localhost>", metadata=var("TALLY_SMTP_FROM"))
    # Data sources: CIDRs or host names that production sources may reach although private/loopback, and
    # how long one call to a source may take.
    sources_allow_hosts: tuple[str, ...] = field(default=(),
                                                 metadata=var("TALLY_SOURCES_ALLOW_HOSTS", _hosts_or_networks))
    source_timeout_seconds: float = field(default=10.0, metadata=var("TALLY_SOURCE_TIMEOUT_SECONDS", _float, 0.1))
    # Analytics store: a ClickHouse server URL (None: embedded chDB under analytics_dir, by default
    # <data_dir>/analytics), a cluster name for ON CLUSTER + Distributed tables, the database, chDB/server
    # per-query bounds (threads, memory, a read's time), and the mirror's period and batch size.
    analytics_url: str | None = field(default=None, metadata=var("TALLY_ANALYTICS_URL", _url("http://user:password@host:8123")))
    analytics_cluster: str | None = field(default=None, metadata=var("TALLY_ANALYTICS_CLUSTER", _clickhouse_name))
    analytics_dir: Path | None = field(default=None, metadata=var("TALLY_ANALYTICS_DIR", lambda _, raw: Path(raw)))
    analytics_database: str = field(default="tally", metadata=var("TALLY_ANALYTICS_DATABASE", _clickhouse_name))
    analytics_max_threads: int = field(default=2, metadata=var("TALLY_ANALYTICS_MAX_THREADS", _int, 1))
    analytics_max_memory_mb: int = field(default=1024, metadata=var("TALLY_ANALYTICS_MAX_MEMORY_MB", _int, 64))
    analytics_read_timeout_seconds: float = field(default=30.0, metadata=var("TALLY_ANALYTICS_READ_TIMEOUT_SECONDS",
                                                                             _float, above=0))
    mirror_interval_ms: int = field(default=750, metadata=var("TALLY_MIRROR_INTERVAL_MS", _int, 10))
    mirror_batch: int = field(default=20_000, metadata=var("TALLY_MIRROR_BATCH", _int, 1))

    @property
    def analytics_path(self) -> Path:
        return self.analytics_dir or self.data_dir / "analytics"

    @property
    def production(self) -> bool:
        return self.env == "production"

    @classmethod
    def from_env(cls) -> Settings:
        values: dict[str, Any] = {}
        for f in fields(cls):
            spec = f.metadata.get("setting")
            raw = os.environ.get(spec["env"]) if spec else None
            if raw in (None, ""):
                continue
            value = spec["parse"](spec["env"], raw)
            _check_bounds(spec, raw, value)
            if spec["minimum"] is not None:
                value = max(spec["minimum"], value)
            values[f.name] = value
        settings = cls(**values)
        if settings.analytics_cluster and not settings.analytics_url:
            # A cluster is a server's; the embedded store would ignore it, and tables would be made unclustered.
            raise ConfigError("TALLY_ANALYTICS_CLUSTER needs TALLY_ANALYTICS_URL (a ClickHouse server of the "
                              "cluster); the embedded store has no cluster")
        if not settings.secret:
            if settings.production:
                raise ConfigError("TALLY_SECRET is required when TALLY_ENV=production")
            settings = cls(**{**values, "secret": persisted_secret(settings.data_dir)})
        return settings


def persisted_secret(data_dir: Path) -> str:
    """Development convenience: one random secret per data folder, kept across restarts."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / "secret"
        if path.exists():
            return path.read_text().strip()
        value = secrets.token_urlsafe(48)
        path.write_text(value)
        path.chmod(0o600)
    except OSError as exc:
        raise ConfigError(f"TALLY_DATA_DIR {data_dir} is not a usable folder (it keeps the development secret): "
                          f"{exc.strerror or exc}") from None
    return value
