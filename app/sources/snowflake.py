"""Snowflake through snowflake-connector-python; rows of options.table or options.query become events by
the shared SQL options model and cursor rules (app.sources.sql).

The connector blocks, so every call runs in a worker thread. Names from options are used unquoted
(they are validated identifiers), so Snowflake resolves them case-insensitively as its users expect;
the upper-case column names it returns for unquoted columns come back lower-cased as property names.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import snowflake.connector
from snowflake.connector import DictCursor
from snowflake.connector.errors import DatabaseError, Error, OperationalError

from app.sources.base import SourceError
from app.sources.netguard import DestinationRefused
from app.sources.schemas import SnowflakeCredentials
from app.sources.sql import PAGE, SqlConnector

T = TypeVar("T")
# Snowflake's error numbers for "could not connect" (network) and "login refused".
UNREACHABLE = {250003, 251011, 251012}
QUERY_WAIT_SECONDS = 600
SNOWFLAKE_DOMAIN = ".snowflakecomputing.com"
SESSION = {"CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False, "QUERY_TAG": "tally-import"}


def fold(name: str) -> str:
    """A column name as Snowflake returns it, as a property name: unquoted (upper-case) names lower-cased."""
    return name.lower() if name == name.upper() else name


class SnowflakeConnector(SqlConnector):
    credentials: SnowflakeCredentials

    def ident(self, name: str) -> str:
        return name  # validated by schemas.Ident / Column; unquoted on purpose (see the module docstring)

    def key(self, column: str) -> str:
        return column.lower()

    def placeholder(self, index: int) -> str:
        return "?"  # qmark: bound by the server, so a `%` in a user's query is never read as a format

    def target(self) -> tuple[str, int, str]:
        """Host, port and protocol: the account's host, or options.base_url (tests, private links)."""
        if self.options.base_url:
            parts = urlsplit(self.options.base_url)
            return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80), parts.scheme
        return f"{self.credentials.account}.snowflakecomputing.com", 443, "https"

    def checked_target(self) -> tuple[str, int, str]:
        """The target, its host checked by the network policy (DestinationRefused if refused). Over plain
        http the checked address itself is used. Over https the connector connects by name (TLS verifies
        it), so a name whose DNS the tenant controls could answer differently after the check: only names
        in Snowflake's own domain (private links included) or hosts the operator allow-listed are used."""
        host, port, protocol = self.target()
        address = self.guard.resolve_sync(host, port)[0]
        if protocol == "http":
            return address, port, protocol
        if not (host.lower().endswith(SNOWFLAKE_DOMAIN) or host.lower() in self.guard.allow_hosts):
            raise DestinationRefused
        return host, port, protocol

    # --- blocking side (worker thread) ---------------------------------------------------------------
    def _connect(self) -> snowflake.connector.SnowflakeConnection:
        c = self.credentials
        host, port, protocol = self.checked_target()
        return snowflake.connector.connect(
            account=c.account, user=c.username, password=c.password, warehouse=c.warehouse, database=c.database,
            # Login gives up within the source timeout; queries may run long (the server answers "still
            # running" and the connector polls), so their retry deadline is the query wait, not that timeout.
            host=host, port=port, protocol=protocol, login_timeout=max(1, int(self.timeout)),
            network_timeout=QUERY_WAIT_SECONDS, session_parameters=SESSION, client_session_keep_alive=False,
            autocommit=True, application="Tally", paramstyle="qmark",
        )

    # --- async side --------------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except Error as exc:
            raise self._reason(exc) from None

    def _reason(self, exc: Error) -> SourceError:
        host, port, _ = self.target()
        message = (exc.msg or type(exc).__name__).strip()[:300]  # a clear reason, not a page of peer text
        if exc.errno in UNREACHABLE or (isinstance(exc, OperationalError) and "connect" in message.lower()):
            # No socket error text: refused vs timed out would tell port states apart.
            return SourceError(f"could not reach Snowflake at {host}:{port}")
        if isinstance(exc, DatabaseError) and exc.errno in (250001, 390100, 390144):
            return SourceError(f"Snowflake refused the login: {message}")
        return SourceError(f"Snowflake: {message}")

    async def open(self) -> snowflake.connector.SnowflakeConnection:
        return await self._call(self._connect)

    async def close(self, conn: snowflake.connector.SnowflakeConnection) -> None:
        await asyncio.to_thread(conn.close)

    async def stream(self, conn: snowflake.connector.SnowflakeConnection, sql: str,
                     args: list) -> AsyncIterator[list[dict]]:
        cursor = conn.cursor(DictCursor)
        try:
            await self._call(cursor.execute, sql, args or None)
            while rows := await self._call(cursor.fetchmany, PAGE):
                yield [{fold(k): v for k, v in row.items()} for row in rows]
        finally:
            await asyncio.to_thread(cursor.close)
