"""What can go wrong while Tally starts, said in one line an operator can act on.

A setting that cannot work is a `ConfigError` (app/settings.py; the CLI prints `configuration error: …` and
exits 2); a dependency that does not answer at start is a `StartupError` (`start-up error: …`, exit 1).
Both are raised here from what the drivers raise, so no start-up failure ends in a traceback. URLs are
named by scheme, host, port and database only: never with their password."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
from redis.asyncio import Redis

from app.settings import ConfigError, Settings
from common.outages import REDIS, REDIS_FALLBACK, Outages
from storage.analytics_mirror import StoreMismatch


class StartupError(RuntimeError):
    """A dependency needed at start could not be reached (PostgreSQL, the ClickHouse server, the port)."""


def postgres_place(dsn: str) -> str:
    """host:port/database of a PostgreSQL URL, without its user or password."""
    try:
        parsed = urlparse(dsn)
        port = parsed.port
    except ValueError:
        return "an unparseable URL"
    host = parsed.hostname or "localhost"
    return f"{host}:{port or 5432}{parsed.path or '/'}"


def server_place(url: str) -> str:
    """scheme://host:port of a server URL, without its user or password."""
    try:
        parsed = urlparse(url)
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:
        return "an unparseable URL"
    return f"{parsed.scheme}://{parsed.hostname}{port}"


@contextlib.asynccontextmanager
async def connecting_to_postgres(dsn: str, *, embedded_in: Path | None = None) -> AsyncIterator[None]:
    """Around the first connection to PostgreSQL: what the driver raises becomes a ConfigError (the URL,
    the database or the login is wrong) or a StartupError (the server does not answer). `embedded_in`:
    the data folder of the embedded server, when DATABASE_URL is unset."""
    place = f"the embedded PostgreSQL in {embedded_in}" if embedded_in else (
        f"PostgreSQL at {postgres_place(dsn)} (DATABASE_URL)")
    try:
        yield
    except (asyncpg.ClientConfigurationError, ValueError, OverflowError) as exc:
        if embedded_in:
            raise
        raise ConfigError(f"DATABASE_URL is not a usable PostgreSQL URL: {exc}") from None
    except asyncpg.InvalidCatalogNameError as exc:
        raise ConfigError(f"{place}: {exc}; create it first (createdb), or correct the URL") from None
    except asyncpg.InvalidAuthorizationSpecificationError as exc:  # includes a wrong password
        raise ConfigError(f"{place} refused the login: {exc}") from None
    except socket.gaierror as exc:
        raise ConfigError(f"{place}: the host name cannot be resolved ({exc.strerror})") from None
    except (OSError, TimeoutError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
            asyncpg.ConnectionDoesNotExistError) as exc:
        raise StartupError(f"cannot connect to {place}: {_reason(exc)}") from None


async def check_redis(redis: Redis, url: str, outages: Outages) -> None:
    """At start, one PING. A Redis that refuses the login (a wrong password), a database it does not have, or
    a server that is not Redis is a ConfigError: each request would otherwise run on the outage fallback for
    as long as the server ran (a refused login) or fail (not Redis). One that does not answer is an outage, as
    it would be later: Tally starts, on the fallback (common/outages.py), and says so now rather than at the
    first request that needs Redis (a mistyped port went unnoticed until then)."""
    from redis.exceptions import AuthenticationError, RedisError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    try:
        await redis.ping()
        return
    except AuthenticationError as exc:  # a ConnectionError to redis-py, but the server did answer
        refusal = exc
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        outages.down(REDIS, exc, REDIS_FALLBACK)
        return
    except RedisError as exc:
        refusal = exc
    raise ConfigError(f"REDIS_URL: {redis_place(url)} answered, but not as a Redis this configuration can use: "
                      f"{refusal}") from None


def redis_place(url: str) -> str:
    """scheme://host:port of a Redis URL (or unix://path), without its password."""
    parsed = urlparse(url)
    return f"unix://{parsed.path}" if parsed.scheme == "unix" else server_place(url)


def clickhouse_reason(exc: BaseException) -> str:
    """The useful part of a clickhouse-connect error about a server that did not answer."""
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\] [^\"')]+", text)
    if found:
        return found.group(0).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def directory_error(path: Path, variable: str, exc: OSError) -> ConfigError:
    return ConfigError(f"{variable} {path} is not a usable folder: {exc.strerror or exc}")


def prepare_folders(settings: Settings) -> None:
    """Make the folders this configuration keeps data in (the embedded PostgreSQL's, the embedded analytics
    store's) before anything starts, so that one that cannot be made is refused at once."""
    needed = []
    if settings.database_url is None:
        needed.append((settings.data_dir, "TALLY_DATA_DIR"))
    if settings.analytics_url is None:
        needed.append((settings.analytics_path, "TALLY_ANALYTICS_DIR" if settings.analytics_dir else "TALLY_DATA_DIR"))
    for path, variable in needed:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise directory_error(path, variable, exc) from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{variable} {path} is not a usable folder: not writable by this user")


def mismatch_message(exc: StoreMismatch, settings: Settings) -> str:
    """What to do about a store that mirrors another database than DATABASE_URL's (exit code 4)."""
    if settings.analytics_url:
        where = f"{server_place(settings.analytics_url)} (TALLY_ANALYTICS_URL), database {settings.analytics_database}"
    else:
        where = str(settings.analytics_path)
    return (f"the analytics store at {where} mirrors another PostgreSQL database, {exc.recorded}, not this one, "
            f"{exc.current}: its dashboards would count the other database's events and miss this one's. Run "
            "`tally analytics rebuild` to make it mirror this database (every event is copied again from "
            "PostgreSQL), or give this database a store of its own (another TALLY_ANALYTICS_DIR, or "
            "TALLY_ANALYTICS_URL / TALLY_ANALYTICS_DATABASE)")


def check_listen_address(host: str, port: int) -> None:
    """HOST must resolve before anything starts (the embedded PostgreSQL, the analytics store)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"HOST {host!r} cannot be resolved ({exc.strerror})") from None
    except UnicodeError:
        raise ConfigError(f"HOST {host!r} is not a host name or address") from None


LISTEN_ERRNOS = {errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL, errno.EPERM}


@contextlib.contextmanager
def listening(host: str, port: int) -> Iterator[None]:
    """Around the server's run: a port that is taken or not ours to bind becomes a StartupError."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in LISTEN_ERRNOS:
            raise
        raise StartupError(f"cannot listen on {host}:{port} (HOST, PORT): {os.strerror(exc.errno)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer (timed out)"
    return str(exc) or type(exc).__name__
