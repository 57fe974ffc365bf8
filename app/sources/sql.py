"""SQL warehouses: PostgreSQL and Redshift (asyncpg), MySQL/MariaDB (aiomysql).

Rows of options.table (or options.query) become events. With options.cursor_column, each sync
streams, in cursor order, the rows whose cursor value is at least the last one stored, skipping the
rows already imported at that value (the cursor keeps their digests), so a row written after a sync
with the value it ended on (a DATETIME's second, a date) is still imported, once; rows whose cursor
is NULL are skipped. Without a cursor column the source is a one-time import; one cut short resumes
skipping the rows its committed pages imported (their digests are kept until it completes, and each page's
rows are looked up among them, so that the resume holds one page's digests, not all). Pages are
committed with their cursor, and a page never ends inside a run of equal cursor values, so a sync cut short resumes
without gaps. BigQuery and Snowflake (app.sources.bigquery, app.sources.snowflake) are SqlConnectors
too, with the same rules.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import Counter
from collections.abc import AsyncIterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import aiomysql
import asyncpg
import orjson
import pymysql
from pymysql.constants import FIELD_TYPE
from pymysql.converters import decoders

from app.sources.base import Batch, Connector, SourceError, event_name, jsonable, rows_to_batch
from app.sources.netguard import UNREACHABLE
from app.sources.schemas import SqlCredentials

PAGE = 1000
DIGEST = 8  # bytes of a row's digest
# TIME values as the text MySQL sends ("100:00:00", "-00:30:00", "12:34:56.500"), not pymysql's timedelta.
MYSQL_DECODERS = {**decoders, FIELD_TYPE.TIME: str}
CLIENT_ERRORS = 2000  # MySQL error codes from 2000 up are the client's own (connection failures)
DONE = {"done": True}
UNDER_WAY = {"done": False}  # a one-time import's pages so far are committed (their digests kept)
LOST = "the connection to {host}:{port} was lost during the sync"
# How long one read of a sync (the query's first rows, then each page) may take, as the warehouses' query wait
# (app/sources/bigquery.py, snowflake.py): a query may run long, but a read that never returns (a table locked
# by a migration, a peer gone silent) would hold the source, and one of the scheduled job's slots, for good.
QUERY_WAIT_SECONDS = 600.0
STUCK = "the database did not answer the query within {seconds:g}s"


def encode_value(value: Any) -> list:
    """A cursor value as JSON that keeps its type (the peer compares it with a typed column)."""
    if isinstance(value, datetime):
        return ["dt", value.isoformat()]
    if isinstance(value, date):
        return ["d", value.isoformat()]
    if isinstance(value, Decimal):
        return ["dec", str(value)]
    if isinstance(value, bool | int | float | str):
        return ["v", value]
    raise SourceError(f"cursor_column values of type {type(value).__name__} are not supported")


def decode_value(pair: list) -> Any:
    kind, raw = pair
    return {"dt": datetime.fromisoformat, "d": date.fromisoformat, "dec": Decimal}.get(kind, lambda v: v)(raw)


def row_digest(row: dict) -> str:
    """A row's content, hashed: tells the rows already imported at the cursor's value (or by a one-time import
    cut short) from new ones."""
    text = orjson.dumps(jsonable(row), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(text, digest_size=DIGEST).hexdigest()


def looked_back(value: Any, seconds: int) -> Any:
    """The cursor value `seconds` before `value` (whole days before a date)."""
    if isinstance(value, datetime):
        return value - timedelta(seconds=seconds)
    if isinstance(value, date):
        return value - timedelta(days=math.ceil(seconds / 86_400))
    raise SourceError("options.lookback_seconds needs a date or date-time cursor_column")


def read_mark(cursor: Any) -> tuple[Any, bool, list[str]]:
    """A stored cursor as (value or None, whether rows at the value may be new, digests of those imported).
    {"at": [kind, value], "seen": [...]} is read with >=; a bare [kind, value] (stored before digests
    were kept) with >, since which rows it covered at that value is not known."""
    if isinstance(cursor, dict) and "at" in cursor:
        return decode_value(cursor["at"]), True, list(cursor.get("seen") or [])
    if isinstance(cursor, list):
        return decode_value(cursor), False, []
    return None, False, []


class SqlConnector(Connector):
    quote = '"'
    default_port = 5432
    credentials: SqlCredentials
    _resuming = False  # a one-time import cut short, read again

    # --- dialect hooks ---------------------------------------------------------------------------
    def placeholder(self, index: int) -> str:
        raise NotImplementedError

    async def open(self) -> Any:
        raise NotImplementedError

    async def close(self, conn: Any) -> None:
        raise NotImplementedError

    def stream(self, conn: Any, sql: str, args: list) -> AsyncIterator[list[dict]]:
        raise NotImplementedError

    # --- shared ----------------------------------------------------------------------------------
    async def checked_address(self) -> str:
        """The first address of the host that the network policy allows (all must be allowed)."""
        c = self.credentials
        return (await self.guard.resolve(c.host, c.port or self.default_port))[0]

    def ident(self, name: str) -> str:
        q = self.quote
        return ".".join(f"{q}{part}{q}" for part in name.split("."))

    def relation(self) -> str | None:
        if self.options.table:
            return self.ident(self.options.table)
        if self.options.query:
            return f"({self.options.query.rstrip().rstrip(';')}) AS tally_src"
        return None

    async def check(self) -> None:
        async with asyncio.timeout(self.timeout):
            conn = await self.open()
            try:
                relation = self.relation()
                # Reading no rows still proves the table/query and the columns named in options exist.
                columns = [c for c in (self.options.cursor_column, self.options.timestamp_column,
                                       self.options.event_column, self.options.user_id_column,
                                       *(self.options.properties or {}).values()) if c]
                columns = list(dict.fromkeys(columns))
                select = ", ".join(self.ident(c) for c in columns) or "*"
                sql = f"SELECT {select} FROM {relation} LIMIT 0" if relation else "SELECT 1"
                async for _ in self.stream(conn, sql, []):
                    pass
            finally:
                await self.close(conn)

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        relation = self.relation()
        if relation is None or cursor == DONE:
            return 0, cursor
        column = self.options.cursor_column
        sql, args, seen = f"SELECT * FROM {relation}", [], []
        if column:
            value, inclusive, seen = read_mark(cursor)
            if value is not None and inclusive and self.options.lookback_seconds:
                value = looked_back(value, self.options.lookback_seconds)
            if value is None:
                sql += f" WHERE {self.ident(column)} IS NOT NULL"
            else:
                args.append(value)
                sql += f" WHERE {self.ident(column)} {'>=' if inclusive else '>'} {self.placeholder(1)}"
            sql += f" ORDER BY {self.ident(column)}"
        # A one-time import cut short: the rows its committed pages imported are not imported again (_commit).
        self._resuming = not column and cursor == UNDER_WAY
        if self._resuming:
            await self.sink.restart_import()
        async with asyncio.timeout(self.timeout):
            conn = await self.open()
        try:
            return await self._import(conn, sql, args, cursor, Counter(seen))
        finally:
            await self.close(conn)

    async def _import(self, conn: Any, sql: str, args: list, cursor: Any, known: Counter) -> tuple[int, Any]:
        """Pages of (row, digest, fresh): a row is stale when the previous sync imported it at the cursor's
        value, or a one-time import cut short imported it (its digest is among those `known`, counted, so
        identical rows each count once)."""
        column, total, pending = self.options.cursor_column, 0, []
        self._window: list[tuple[Any, str]] = []  # (value, digest) of committed rows the next mark may keep
        async for rows in self.stream(conn, sql, args):
            for row in rows:
                digest = row_digest(row)
                fresh = known.get(digest, 0) <= 0
                if not fresh:  # counted down, never up: `known` stays the size it started at, whatever streams
                    known[digest] -= 1
                pending.append((row, digest, fresh))
            if len(pending) < PAGE:
                continue
            cut = len(pending)
            if column:  # keep the trailing run of equal cursor values for the next page
                last = pending[-1][0][self.key(column)]
                while cut > 0 and pending[cut - 1][0][self.key(column)] == last:
                    cut -= 1
                if cut == 0:
                    continue
            page, pending = pending[:cut], pending[cut:]
            total += await self._commit(page, self._mark(page) if column else UNDER_WAY)
        final = self._mark(pending) if column and pending else (cursor if column else DONE)
        return total + await self._commit(pending, final), final

    async def _commit(self, page: list[tuple[dict, str, bool]], cursor: Any) -> int:
        if self._resuming and page:
            page = await self._skip_kept(page)
        rows = [row for row, _, fresh in page if fresh]
        batch = self._batch(rows, cursor)
        if cursor == UNDER_WAY:
            batch.digests_imported = b"".join(bytes.fromhex(digest) for _, digest, fresh in page if fresh)
            batch.digests_skipped = [bytes.fromhex(digest) for _, digest, fresh in page if not fresh]
        batch.import_done = cursor == DONE
        await self.sink.commit(batch)
        return len(rows)

    async def _skip_kept(self, page: list[tuple[dict, str, bool]]) -> list[tuple[dict, str, bool]]:
        """A page of a resumed one-time import: a row is stale while rows like it that the pages committed
        before the cut imported are left unread by this sync (counted, so identical rows each count)."""
        keys = [bytes.fromhex(digest) for _, digest, _ in page]
        unread = Counter(await self.sink.kept_unread(list(set(keys))))
        marked = []
        for (row, digest, _), key in zip(page, keys, strict=True):
            marked.append((row, digest, unread[key] <= 0))
            unread[key] -= 1
        return marked

    def _mark(self, page: list[tuple[dict, str, bool]]) -> dict:
        """The cursor after a page: its last value and the digests of every row read (this sync or the
        previous one) from that value, or from lookback_seconds before it, on."""
        key = self.key(self.options.cursor_column or "")
        last = page[-1][0][key]
        if self.options.lookback_seconds:
            floor = looked_back(last, self.options.lookback_seconds)
            self._window = [(v, d) for v, d in self._window if v >= floor]
            self._window += [(row[key], digest) for row, digest, _ in page if row[key] >= floor]
        else:  # equality: a TIME cursor arrives as text, which does not sort as its values do
            self._window = [(row[key], digest) for row, digest, _ in page if row[key] == last]
        return {"at": encode_value(last), "seen": [digest for _, digest in self._window]}

    def key(self, column: str) -> str:
        """The key of a column named in options in the rows the peer returns."""
        return column

    def _batch(self, rows: list[dict], cursor: Any) -> Batch:
        opts = self.options
        default_name = event_name(opts.table.split(".")[-1], "query_row") if opts.table else "query_row"
        return rows_to_batch(rows, opts, default_name=default_name, cursor=cursor, key=self.key)


class PostgresConnector(SqlConnector):
    def placeholder(self, index: int) -> str:
        return f"${index}"

    async def open(self) -> asyncpg.Connection:
        c = self.credentials
        port = c.port or self.default_port
        address = await self.checked_address()
        try:
            # To the checked address (no second lookup); sslmode stays asyncpg's "prefer" as before.
            conn = await asyncpg.connect(
                host=address, port=port, user=c.username, password=c.password,
                database=c.database, timeout=self.timeout,
            )
        except asyncpg.PostgresError as exc:
            raise SourceError(f"the database refused the connection: {exc}") from None
        except (TimeoutError, OSError, asyncpg.InterfaceError, ConnectionError):
            # No socket error text: refused vs timed out would tell port states apart.
            raise SourceError(UNREACHABLE.format(host=c.host, port=port)) from None
        try:
            await self.read_as_text(conn)
        except BaseException:
            await conn.close(timeout=5)
            raise
        return conn

    async def read_as_text(self, conn: asyncpg.Connection) -> None:
        """Intervals as PostgreSQL writes them ("100:00:00", "1 mon 2 days 03:00:00"): asyncpg's timedelta
        turns a month into 30 days, and its text was Python's ("4 days, 4:00:00"). json and jsonb values as
        the JSON they hold, not as their text (asyncpg's default), so a property can be an object."""
        await conn.set_type_codec("interval", schema="pg_catalog", encoder=str, decoder=str, format="text")
        for name in ("json", "jsonb"):
            await conn.set_type_codec(name, schema="pg_catalog", encoder=lambda v: orjson.dumps(v).decode(),
                                      decoder=orjson.loads, format="text")

    async def close(self, conn: asyncpg.Connection) -> None:
        await conn.close(timeout=5)

    async def stream(self, conn: asyncpg.Connection, sql: str, args: list) -> AsyncIterator[list[dict]]:
        try:
            async with conn.transaction(readonly=True):
                page: list[dict] = []
                # asyncpg cancels the query on the server when a read times out.
                async for record in conn.cursor(sql, *args, prefetch=PAGE, timeout=QUERY_WAIT_SECONDS):
                    page.append(dict(record))
                    if len(page) >= PAGE:
                        yield page
                        page = []
                if page:
                    yield page
        except asyncpg.PostgresError as exc:
            raise SourceError(f"query failed: {exc}") from None
        except TimeoutError:  # before OSError, its base class
            raise SourceError(STUCK.format(seconds=QUERY_WAIT_SECONDS)) from None
        except (asyncpg.InterfaceError, ConnectionError, OSError):
            if not conn.is_closed():
                raise
            # The server went away mid-read (restarted, failed over, the backend terminated).
            c = self.credentials
            raise SourceError(LOST.format(host=c.host, port=c.port or self.default_port)) from None


class RedshiftConnector(PostgresConnector):
    default_port = 5439

    async def read_as_text(self, conn: asyncpg.Connection) -> None:
        pass  # asyncpg's codec setup introspects pg_type, which Redshift is not known to answer alike


class MysqlConnector(SqlConnector):
    quote = "`"
    default_port = 3306

    def placeholder(self, index: int) -> str:
        return "%s"

    # pymysql formats every statement with `%` (stream() always passes arguments, an empty tuple too),
    # so a literal % in a name or in the user's query (LIKE 'a%') is doubled here, once.
    def ident(self, name: str) -> str:
        return super().ident(name).replace("%", "%%")

    def relation(self) -> str | None:
        relation = super().relation()
        return relation.replace("%", "%%") if relation and self.options.query else relation

    async def open(self) -> aiomysql.Connection:
        c = self.credentials
        port = c.port or self.default_port
        address = await self.checked_address()
        try:
            return await aiomysql.connect(
                host=address, port=port, user=c.username, password=c.password,
                db=c.database, connect_timeout=self.timeout, autocommit=True, charset="utf8mb4",
                conv=MYSQL_DECODERS,
                # TIMESTAMP values are sent in the session's zone (the server's by default) as naive
                # text, and naive times are taken as UTC: the session must be UTC.
                init_command="SET time_zone = '+00:00'",
            )
        except pymysql.err.OperationalError as exc:
            if exc.args and isinstance(exc.args[0], int) and exc.args[0] < CLIENT_ERRORS:
                raise SourceError(f"the database refused the connection: {exc.args[-1]}") from None
            # Client-side errors (2003 can't connect...) carry the socket error: not shown.
            raise SourceError(UNREACHABLE.format(host=c.host, port=port)) from None
        except (TimeoutError, OSError):
            raise SourceError(UNREACHABLE.format(host=c.host, port=port)) from None

    async def close(self, conn: aiomysql.Connection) -> None:
        conn.close()

    async def stream(self, conn: aiomysql.Connection, sql: str, args: list) -> AsyncIterator[list[dict]]:
        stuck = False
        try:
            cur = await conn.cursor(aiomysql.SSDictCursor)
            try:
                async with asyncio.timeout(QUERY_WAIT_SECONDS):
                    await cur.execute(sql, tuple(args))
                while True:
                    async with asyncio.timeout(QUERY_WAIT_SECONDS):
                        rows = await cur.fetchmany(PAGE)
                    if not rows:
                        break
                    yield list(rows)
            except TimeoutError:
                stuck = True
                raise SourceError(STUCK.format(seconds=QUERY_WAIT_SECONDS)) from None
            finally:
                # aiomysql drops the connection when a read is cancelled: closing the cursor would read the
                # rest of the answer from it.
                if not stuck:
                    await cur.close()
        except pymysql.err.MySQLError as exc:
            raise SourceError(f"query failed: {exc.args[-1]}") from None
