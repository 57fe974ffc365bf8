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
    # Actor tuning: batch size cap, linger before a flush, mailbox bound (events).
    batch_max: int = 2000
    batch_linger_ms: float = 1.0
    mailbox_events: int = 20000
    actor_idle_seconds: float = 300.0
    key_cache_seconds: float = 2.0
    pool_max: int = 10
    # Tests turn the timers off and call Scheduler.run_now() instead.
    run_scheduler: bool = True
    extra: dict = field(default_factory=dict)

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
            batch_max=_int("TALLY_BATCH_MAX", 2000),
            mailbox_events=_int("TALLY_MAILBOX_EVENTS", 20000),
            pool_max=_int("TALLY_DB_POOL_MAX", 10),
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
