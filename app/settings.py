"""Configuration, read once from the environment."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(RuntimeError):
    pass


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    redis_url: str | None = None
    env: str = "development"
    secret: str = ""
    data_dir: Path = Path(".tally-data")
    host: str = "0.0.0.0"
    port: int = 8000
    trusted_proxies: tuple[str, ...] = ()
    # Actor tuning: batch size cap, linger before a flush, mailbox bound (events), flushes at once.
    batch_max: int = 5000
    batch_linger_ms: float = 0.0
    mailbox_events: int = 50000
    flushes_in_flight: int = 3
    actor_idle_seconds: float = 300.0
    key_cache_seconds: float = 2.0
    pool_max: int = 10
    # Heavy reads get their own small pool so they cannot starve ingestion, /readyz or other tenants.
    report_pool_max: int = 3
    # Event exports: at once per signed-in account, and how long one write may wait for a slow reader.
    exports_per_account: int = 2
    export_write_timeout_seconds: float = 30.0
    access_log: bool = True
    # Tests turn the timers off and call Scheduler.run_now() instead.
    run_scheduler: bool = True
    # Site ingestion: events per minute per site and per visitor IP (0 disables), DNS-over-HTTPS
    # resolver for domain verification, optional MaxMind country database.
    site_events_per_min: int = 60_000
    ip_events_per_min: int = 600
    doh_url: str = "https://cloudflare-dns.com/dns-query"
    geoip_db: str | None = None
    # Reports: synchronous run timeout; custom SQL's own timeout and row cap; SMTP for scheduled delivery.
    report_timeout_seconds: float = 30.0
    custom_sql_timeout_seconds: float = 5.0
    custom_sql_max_rows: int = 10_000
    custom_sql_max_bytes: int = 8 * 1024 * 1024
    smtp_url: str | None = None
    smtp_from: str = "Tally Reports <reports@tally.localhost>"
    # Data sources: CIDRs or host names that production sources may reach although private/loopback.
    sources_allow_hosts: tuple[str, ...] = ()
    # Analytics store: a ClickHouse server URL (None: embedded chDB under analytics_dir, by default
    # <data_dir>/analytics), a cluster name for ON CLUSTER + Distributed tables, the database, chDB/server
    # per-query bounds, and the mirror's period and batch size.
    analytics_url: str | None = None
    analytics_cluster: str | None = None
    analytics_dir: Path | None = None
    analytics_database: str = "tally"
    analytics_max_threads: int = 2
    analytics_max_memory_mb: int = 1024
    mirror_interval_ms: int = 500
    mirror_batch: int = 20_000
    extra: dict = field(default_factory=dict)

    @property
    def analytics_path(self) -> Path:
        return self.analytics_dir or self.data_dir / "analytics"

    @property
    def production(self) -> bool:
        return self.env == "production"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ.get("TALLY_ENV", "development")
        if env not in ("development", "production"):
            raise ConfigError("TALLY_ENV must be 'development' or 'production'")
        data_dir = Path(os.environ.get("TALLY_DATA_DIR") or ".tally-data")
        secret = os.environ.get("TALLY_SECRET", "")
        if not secret:
            if env == "production":
                raise ConfigError("TALLY_SECRET is required when TALLY_ENV=production")
            secret = persisted_secret(data_dir)
        allow = tuple(h.strip() for h in os.environ.get("TALLY_SOURCES_ALLOW_HOSTS", "").split(",") if h.strip())
        proxies = tuple(p.strip() for p in os.environ.get("TALLY_TRUSTED_PROXIES", "").split(",") if p.strip())
        return cls(
            database_url=os.environ.get("DATABASE_URL") or None,
            redis_url=os.environ.get("REDIS_URL") or None,
            env=env,
            secret=secret,
            data_dir=data_dir,
            host=os.environ.get("HOST", "0.0.0.0"),
            port=_int("PORT", 8000),
            trusted_proxies=proxies,
            batch_max=_int("TALLY_BATCH_MAX", 5000),
            batch_linger_ms=float(_int("TALLY_BATCH_LINGER_US", 0)) / 1000,
            mailbox_events=_int("TALLY_MAILBOX_EVENTS", 50000),
            flushes_in_flight=max(1, _int("TALLY_FLUSHES_IN_FLIGHT", 3)),
            pool_max=_int("TALLY_DB_POOL_MAX", 10),
            report_pool_max=max(1, _int("TALLY_REPORT_POOL_MAX", 3)),
            exports_per_account=max(1, _int("TALLY_EXPORTS_PER_ACCOUNT", 2)),
            export_write_timeout_seconds=float(os.environ.get("TALLY_EXPORT_WRITE_TIMEOUT_SECONDS") or 30),
            access_log=os.environ.get("TALLY_ACCESS_LOG", "1") not in ("0", "false", "no"),
            report_timeout_seconds=float(os.environ.get("TALLY_REPORT_TIMEOUT_SECONDS") or 30),
            custom_sql_max_rows=max(1, _int("TALLY_CUSTOM_SQL_MAX_ROWS", 10_000)),
            custom_sql_max_bytes=max(1024, _int("TALLY_CUSTOM_SQL_MAX_BYTES", 8 * 1024 * 1024)),
            smtp_url=os.environ.get("TALLY_SMTP_URL") or None,
            smtp_from=os.environ.get("TALLY_SMTP_FROM") or "Tally Reports <reports@tally.localhost>",
            site_events_per_min=_int("TALLY_SITE_EVENTS_PER_MIN", 60_000),
            ip_events_per_min=_int("TALLY_IP_EVENTS_PER_MIN", 600),
            doh_url=os.environ.get("TALLY_DOH_URL") or "https://cloudflare-dns.com/dns-query",
            geoip_db=os.environ.get("TALLY_GEOIP_DB") or None,
            sources_allow_hosts=allow,
            analytics_url=os.environ.get("TALLY_ANALYTICS_URL") or None,
            analytics_cluster=os.environ.get("TALLY_ANALYTICS_CLUSTER") or None,
            analytics_database=os.environ.get("TALLY_ANALYTICS_DATABASE") or "tally",
            analytics_max_threads=max(1, _int("TALLY_ANALYTICS_MAX_THREADS", 2)),
            analytics_max_memory_mb=max(64, _int("TALLY_ANALYTICS_MAX_MEMORY_MB", 1024)),
            mirror_interval_ms=max(10, _int("TALLY_MIRROR_INTERVAL_MS", 500)),
        )


def persisted_secret(data_dir: Path) -> str:
    """Development convenience: one random secret per data folder, kept across restarts."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "secret"
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_urlsafe(48)
    path.write_text(value)
    path.chmod(0o600)
    return value
