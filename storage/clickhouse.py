"""The analytics store: ClickHouse tables reached through clickhouse-connect, either embedded (chDB, an
in-process ClickHouse registered as clickhouse-connect's `chdb` backend) or a ClickHouse server/cluster.

Blocking client calls run in a worker thread so the event loop keeps answering. Every query carries
bounded `max_threads` and `max_memory_usage`, so one report cannot take the machine. chDB allows one
open data directory per process: `open_store` is called once per process (the tests share one store).
Each client serializes the calls on its connection: writes (inserts, commands, deletes) go through one
client, one at a time, and reads through a few clients of their own (`READERS`), so that reads run beside
each other and beside the writes instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import queue
import re
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

import clickhouse_connect

from storage.clickhouse_schema import (
    ACTOR_KEY,
    CODECS,
    CSV_INPUT_SETTINGS,
    DAY_STATES,
    INPUT_COLUMNS,
    INPUT_TABLE,
    KEYED_FROM_INPUT,
    LC,
    LC_SITE_COLUMNS,
    ROW_GRANULES,
    SESSION_STATES,
    SITE_FROM_INPUT,
    SITE_ORDER,
    STATE_TABLES,
    TABLES,
    VISIT_COLUMNS,
)

log = logging.getLogger("tally.analytics")
T = TypeVar("T")

# DateTime64's range; bounds beyond it (a chart "from the beginning of time") are clamped to it.
TS_MIN = datetime(1900, 1, 1, tzinfo=UTC)
TS_MAX = datetime(2299, 12, 31, 23, 59, 59, tzinfo=UTC)


def bind_value(value: object) -> object:
    if isinstance(value, datetime):
        return min(max(value, TS_MIN), TS_MAX)
    return value


class Params:
    """Bound parameters of one statement, named p0, p1, ...: `bind(value)` (or calling it) returns the
    `{pN:Type}` placeholder to put in the SQL text."""

    def __init__(self) -> None:
        self.params: dict = {}

    def bind(self, value: object, kind: str = "String") -> str:
        name = f"p{len(self.params)}"
        self.params[name] = bind_value(value)
        return "{" + name + ":" + kind + "}"

    def used_in(self, sql: str) -> dict:
        """The parameters `sql` names, for one of several statements assembled with these parameters."""
        return {name: value for name, value in self.params.items() if "{" + name + ":" in sql}

    __call__ = bind


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

DERIVED = "derived from site_events"  # the comment of a derived table once its backfill is complete
COMPUTED = ("MATERIALIZED", "ALIAS")  # default kinds of columns an INSERT cannot write


class TableInfo(NamedTuple):
    comment: str
    sorting_key: str
    engine_full: str


class StoreBusy(RuntimeError):
    """The embedded store's directory is open in another process (a running server)."""


# Clients reading at the same time: the unfiltered overview's three queries side by side
# (storage/analytics_overview.py) take about the longest one's time instead of the sum. Each query keeps its
# own memory bound, so reads and a write at once may hold (READERS + 1) times it.
READERS = 3
# Embedded, reads run their threads at this nice value: on a machine shared with the event loop, ingestion
# keeps its CPU while dashboards read (the mirror's inserts keep the normal priority, and the lag its bound).
READ_NICE = 10


@dataclass
class AnalyticsStore:
    client: Any  # clickhouse_connect Client (HTTP or chDB): writes and schema changes, one call at a time
    database: str
    cluster: str | None = None
    embedded: bool = True
    query_settings: dict[str, Any] = field(default_factory=dict)
    lock_file: Any = None  # embedded: the open file whose flock marks the directory as in use
    refill_needed: bool = False  # set by ensure_schema: the store was emptied and must be refilled
    # How long after its last insert a day's counts may be computed, and by how much a computation must
    # postdate that insert to be used. Embedded: 0, writes go through one client, one call at a time, so an
    # insert is complete and visible before any later computation (an INSERT ... SELECT, a write too)
    # starts. A server takes inserts from every process at the same time: an insert's rows must be visible
    # within this time of its view's clock reading.
    settle_seconds: float = 0.0
    readers: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # idle read clients (else `client`)
    read_settings: dict[str, Any] = field(default_factory=dict)  # on top of query_settings, for reads
    _making: dict[Hashable, asyncio.Future] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._reader_count = self.readers.qsize()
        if self.cluster:
            # Every table is sharded by its site (or workspace), and every read names one: only that shard
            # is asked. Reads also put an IN (SELECT ... FROM <Distributed table>) inside a read of a
            # Distributed table (the sessions matching a filter, entry/exit page filters), which ClickHouse
            # refuses by default (distributed_product_mode = 'deny'); the rows such a subquery needs are on
            # the shard that runs it, so 'local' runs it there on the local table.
            self.query_settings.setdefault("optimize_skip_unused_shards", 1)
            self.query_settings.setdefault("distributed_product_mode", "local")
            # An insert through a Distributed table returns once every shard holds its rows, not once they
            # are queued on this node: a read after the mirror's catch-up sees them, and a day's counts are
            # on their shard before the marker that makes them usable.
            self.query_settings.setdefault("distributed_foreground_insert", 1)

    async def once(self, key: Hashable, make: Callable[[], Awaitable[T]]) -> T:
        """Run `make()` unless a run for the same key is in flight in this process, whose result is then
        shared. For the derived rows the first read that lacks them writes (a day's counts, a window's cached
        visitor states): the dashboard sends its reads at once, and each would otherwise write its own copy."""
        running = self._making.get(key)
        if running is None:
            running = self._making[key] = asyncio.ensure_future(make())

            def done(future: asyncio.Future) -> None:
                if self._making.get(key) is future:
                    del self._making[key]
                if not future.cancelled():
                    future.exception()  # retrieved here too, for when every caller has gone away

            running.add_done_callback(done)
        return await asyncio.shield(running)  # one caller going away does not cancel the others' run

    # --- blocking calls, run in a thread ------------------------------------------------------------

    async def query(self, sql: str, params: dict[str, Any] | None = None, *,
                    settings: dict[str, Any] | None = None) -> list[tuple]:
        return await asyncio.to_thread(self.query_sync, sql, params, settings)

    def query_sync(self, sql: str, params: dict[str, Any] | None = None,
                   settings: dict[str, Any] | None = None) -> list[tuple]:
        reader = self.readers.get() if self._reader_count else self.client
        try:
            result = reader.query(sql, parameters=params or {},
                                  settings={**self.query_settings, **self.read_settings, **(settings or {})})
        finally:
            if reader is not self.client:
                self.readers.put(reader)
        return result.result_rows

    async def command(self, sql: str, params: dict[str, Any] | None = None, *,
                      settings: dict[str, Any] | None = None) -> None:
        await asyncio.to_thread(self.command_sync, sql, params, settings)

    def command_sync(self, sql: str, params: dict[str, Any] | None = None,
                     settings: dict[str, Any] | None = None) -> None:
        self.client.command(sql, parameters=params or {}, settings={**self.query_settings, **(settings or {})})

    def insert_events_csv_sync(self, data: bytes | BinaryIO) -> None:
        """Insert raw events (PostgreSQL CSV of INPUT_COLUMNS) through `events_in` and its views."""
        self.client.raw_insert(f"{self.database}.events_in", INPUT_COLUMNS, data, fmt="CSV",
                               settings={**self.query_settings, **CSV_INPUT_SETTINGS})

    # --- schema ---------------------------------------------------------------------------------------

    def table(self, name: str) -> str:
        """The table queries and inserts use (the Distributed one in cluster mode)."""
        return f"{self.database}.{name}"

    def local_table(self, name: str) -> str:
        """The table holding the rows (deletes and truncates go here)."""
        return f"{self.database}.{name}_local" if self.cluster else f"{self.database}.{name}"

    @property
    def on_cluster(self) -> str:
        # chDB has no distributed DDL: a cluster of its own config (the tests', whose shards are all this
        # process) gets its tables created in place, which is all ON CLUSTER would do there.
        return f" ON CLUSTER {self.cluster}" if self.cluster and not self.embedded else ""

    def ensure_schema(self) -> None:
        self.command_sync(f"CREATE DATABASE IF NOT EXISTS {self.database}{self.on_cluster}")
        # Stores from before `events_in` hashed visitors and sessions in Python (BLAKE2b): their rows would
        # not group with new ones, so they are emptied and refilled from PostgreSQL (`refill_needed`).
        self.refill_needed = bool(self.client.command(f"EXISTS TABLE {self.local_table('site_events')}")) \
            and not self.client.command(f"EXISTS TABLE {self.database}.events_in")
        if self.refill_needed:
            for name in TABLES:
                self.command_sync(f"TRUNCATE TABLE IF EXISTS {self.local_table(name)}{self.on_cluster}")
        self._regranulate()
        for name, (body, shard_key, engine) in TABLES.items():
            self.command_sync(f"CREATE TABLE IF NOT EXISTS {self.local_table(name)}{self.on_cluster} "
                              + body.format(engine=engine))
            if self.cluster:
                self._create_distributed(self.table(name), self.local_table(name), shard_key)
        self._resort("site_events", SITE_ORDER)
        columns = {name: self._columns(name) for name in CODECS}
        # Stores from before a column became LowCardinality get it converted (a mutation of that column).
        strings = [c for c in LC_SITE_COLUMNS if columns["site_events"][c][0] == "String"]
        if strings:
            self._alter("site_events", ", ".join(f"MODIFY COLUMN {c} {LC}" for c in strings))
        # A store from before the actor key gets the column; parts written before it compute it from the
        # actor on read until the mutation has stored it in them.
        if "actor_key" not in columns["keyed_events"]:
            self._alter("keyed_events", f"ADD COLUMN IF NOT EXISTS actor_key UInt64 MATERIALIZED {ACTOR_KEY}")
            self.command_sync(f"ALTER TABLE {self.local_table('keyed_events')}{self.on_cluster} "
                              "MATERIALIZE COLUMN actor_key")
        # A sessions table from before the visit columns (visitor, entry and exit page) gains them with
        # neutral defaults. Derived tables are complete once their table comment says so: until then (a new
        # table, one from before its columns, or a backfill cut short) their view is (re)created, so that
        # it fills every column, and they are derived again from the events already held (min/max and set
        # union merge with the rows already there), then marked.
        missing = [c for c in VISIT_COLUMNS if c not in columns["site_sessions"]]
        if missing:
            self._alter("site_sessions", ", ".join(f"ADD COLUMN IF NOT EXISTS {c} {VISIT_COLUMNS[c]}" for c in missing))
        # Cached states from before they held goals gain their event counts (a cache: rows without one are
        # never read for goals, whose dim is new).
        if "events" not in columns["site_window_keys"]:
            self._alter("site_window_keys", "ADD COLUMN IF NOT EXISTS events UInt64")
        # Stores from before a column's codec get it: parts written or merged from then on use it
        # (`tally analytics rebuild` rewrites every part). Columns added just above have theirs.
        for name, codecs in CODECS.items():
            changed = [f"MODIFY COLUMN {c} {codec}" for c, codec in codecs.items()
                       if c in columns[name] and columns[name][c][1] != codec]
            if changed:
                self._alter(name, ", ".join(changed))
        # On the local tables: in cluster mode each shard keeps the sessions and days of its own sites.
        for name, states, backfill in (("site_sessions", SESSION_STATES, self.backfill_sessions_sync),
                                       ("site_days", DAY_STATES, self.backfill_days_sync)):
            view = f"{self.database}.{name}_mv{self.on_cluster}"
            complete = self._table_info(name).comment == DERIVED
            if not complete:
                self.command_sync(f"DROP VIEW IF EXISTS {view}")
            self.command_sync(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {view} TO {self.local_table(name)} AS "
                              + states.format(source=self.local_table("site_events")))
            if not complete:
                backfill()
                self.command_sync(f"ALTER TABLE {self.local_table(name)}{self.on_cluster} MODIFY COMMENT '{DERIVED}'")
        # Where inserts land (on each node in cluster mode); its views write through the Distributed tables.
        self.command_sync(f"CREATE TABLE IF NOT EXISTS {self.database}.events_in{self.on_cluster} {INPUT_TABLE}")
        for view, target, select in (("site_events_in_mv", "site_events", SITE_FROM_INPUT),
                                     ("keyed_events_in_mv", "keyed_events", KEYED_FROM_INPUT)):
            self.command_sync(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {self.database}.{view}{self.on_cluster} "
                              f"TO {self.table(target)} AS " + select.format(source=f"{self.database}.events_in"))

    def _resort(self, name: str, order: str) -> None:
        """A table from before its sorting key changed gets its rows copied, in blocks, into a table of the
        current layout, which then takes its name. The views that read or write it go by name, so they
        follow; the tables derived from it need nothing (the rows are the same). A copy cut short leaves
        the old table in place and is started again at the next open. In cluster mode every shard copies
        its own rows, through a Distributed table over the shards' copies (below)."""
        table = self.local_table(name)
        staging, spread = f"{table}_resorted", f"{table}_resorted_all"
        for leftover in (spread, staging):
            self.command_sync(f"DROP TABLE IF EXISTS {leftover}{self.on_cluster}")
        key = self._table_info(name).sorting_key
        if key in ("", order):  # no such table, or already sorted so
            return
        log.warning("re-sorting %s by (%s): a copy of its rows, once", table, order)
        body, shard_key, engine = TABLES[name]
        self.command_sync(f"CREATE TABLE {staging}{self.on_cluster} " + body.format(engine=engine))
        # By name, not position: columns added to the old table by ALTER sit at its end. Stored ones only.
        stored = {c for c, (_, _, kind) in self._columns_of(staging).items() if kind not in COMPUTED}
        kept = ", ".join(c for c in self._columns(name) if c in stored)
        # In parts of 100,000 rows, each sorted and written before the next is read, within the query bound.
        settings = {"max_block_size": 65_536, "min_insert_block_size_rows": 100_000,
                    "min_insert_block_size_bytes": 0, "max_insert_threads": 1}
        target, source = staging, table
        if self.cluster:
            # An INSERT into a Distributed table that SELECTs from another of the same cluster runs on every
            # shard, from its local table into its local table: each shard's rows stay on it, copied there.
            self._create_distributed(spread, staging, shard_key)
            target, source = spread, self.table(name)
            settings |= {"parallel_distributed_insert_select": 2}
        self.command_sync(f"INSERT INTO {target} ({kept}) SELECT {kept} FROM {source}", settings=settings)
        self.command_sync(f"EXCHANGE TABLES {table} AND {staging}{self.on_cluster}")
        for done in ([spread] if self.cluster else []) + [staging]:
            self.command_sync(f"DROP TABLE {done}{self.on_cluster}")

    def _create_distributed(self, table: str, over: str, shard_key: str) -> None:
        """A Distributed table `table` over each shard's `over` (both database-qualified), rows placed by
        `shard_key`."""
        self.command_sync(f"CREATE TABLE IF NOT EXISTS {table}{self.on_cluster} AS {over} ENGINE = Distributed("
                          f"{self.cluster}, {self.database}, {over.split('.', 1)[1]}, {shard_key})")

    def _regranulate(self) -> None:
        """Tables of large states from before their one-row granules are dropped, to be made again: the
        window visitors are a cache, and site_days, without its comment, is derived again from the events
        (at 10M events, 3 s once). In cluster mode each shard's table is dropped; the Distributed table over
        them, whose columns are the same, stays."""
        for name in STATE_TABLES:
            engine = self._table_info(name).engine_full
            if not engine or ROW_GRANULES in engine:
                continue
            log.warning("making %s again with one row per granule", name)
            self.command_sync(f"DROP TABLE {self.local_table(name)}{self.on_cluster}")

    def _table_info(self, name: str) -> TableInfo:
        """The comment, sorting key and engine clause of the table holding the rows (all '' when it does not
        exist)."""
        table = self.local_table(name).split(".", 1)[1]
        rows = self.query_sync("SELECT comment, sorting_key, engine_full FROM system.tables "
                               "WHERE database = {d:String} AND name = {t:String}", {"d": self.database, "t": table})
        return TableInfo(*rows[0]) if rows else TableInfo("", "", "")

    def _columns(self, name: str) -> dict[str, tuple[str, str, str]]:
        """The columns of the table holding the rows: name -> (type, compression codec, default kind)."""
        return self._columns_of(self.local_table(name))

    def _columns_of(self, table: str) -> dict[str, tuple[str, str, str]]:
        return {n: (t, c, k) for n, t, c, k in self.query_sync(
            "SELECT name, type, compression_codec, default_kind FROM system.columns WHERE database = {d:String} "
            "AND table = {t:String}", {"d": self.database, "t": table.split(".", 1)[1]})}

    def _alter(self, name: str, clause: str) -> None:
        """ALTER the table holding the rows and, in cluster mode, its Distributed table (whose columns
        must match), with one clause list."""
        for target in [self.local_table(name)] + ([self.table(name)] if self.cluster else []):
            self.command_sync(f"ALTER TABLE {target}{self.on_cluster} {clause}")

    def backfill_sessions_sync(self, since: datetime | None = None) -> None:
        """(Re)derive the session-day rows of every day from `since`'s (all days when None) from site_events.
        Rows the view writes meanwhile are merged with these by min/max, so running both is harmless."""
        self._backfill("site_sessions", SESSION_STATES, since)

    def backfill_days_sync(self, since: datetime | None = None) -> None:
        """The same for site_days (visitor sets are merged by union; `written` becomes now)."""
        self._backfill("site_days", DAY_STATES, since)

    def _backfill(self, name: str, states: str, since: datetime | None) -> None:
        # Through the Distributed tables in cluster mode: the rows land on their site's shard, as events do.
        # One day at a time: a day's groups fit the query's memory bound, all of a large store's do not.
        events = self.table("site_events")
        after = "" if since is None else " WHERE ts >= toStartOfDay({s:DateTime64(6, 'UTC')})"
        days = self.query_sync(f"SELECT DISTINCT toDate(ts) AS d FROM {events}{after} ORDER BY d",
                               {"s": since} if since is not None else None)
        for (day,) in days:
            source = f"(SELECT * FROM {events} WHERE toDate(ts) = {{d:Date}})"
            self.command_sync(f"INSERT INTO {self.table(name)} " + states.format(source=source), {"d": day})

    async def delete_where(self, name: str, condition: str, params: dict[str, Any]) -> None:
        """A synchronous lightweight DELETE: rows are gone from every read once this returns."""
        await asyncio.to_thread(
            self.client.command,
            f"DELETE FROM {self.local_table(name)}{self.on_cluster} WHERE {condition}",
            parameters=params, settings={**self.query_settings, "lightweight_deletes_sync": 2},
        )

    def close(self) -> None:
        for _ in range(self._reader_count):
            self.readers.get().close()
        self.client.close()
        if self.lock_file is not None:
            self.lock_file.close()  # releases the flock


def open_store(*, url: str | None, path: Path, database: str, cluster: str | None = None,
               max_threads: int = 2, max_memory_mb: int = 1024, chdb_config: Path | None = None) -> AnalyticsStore:
    """Open (blocking) the store and create its tables. url None: embedded chDB at `path`, with the server
    configuration file `chdb_config` if given (the tests define a cluster there); a cluster is a server's."""
    if not _NAME.match(database):
        raise ValueError(f"invalid analytics database name {database!r}")
    if cluster is not None and not _NAME.match(cluster):
        raise ValueError(f"invalid analytics cluster name {cluster!r}")
    lock_file = None
    if url:
        def connect() -> Any:  # each client its own HTTP session: a server runs one query at a time per session
            return clickhouse_connect.get_client(dsn=url)
    else:
        path.mkdir(parents=True, exist_ok=True)
        lock_file = (path / "tally.lock").open("a")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise StoreBusy(f"the analytics store at {path} is open in another process (is tally serve "
                            "running?)") from None
        options = {"config-file": str(chdb_config)} if chdb_config else None

        def connect() -> Any:  # each client its own connection to the process's one engine
            return clickhouse_connect.get_client(dsn=f"chdb://{path.resolve()}", chdb_options=options)
    client = connect()
    readers: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(READERS):
        readers.put(connect())
    # Copies of one event share its ts, hence its month partition: FINAL may merge each partition alone.
    settings = {"max_threads": max_threads, "max_memory_usage": max_memory_mb * 1024 * 1024,
                "do_not_merge_across_partitions_select_final": 1}
    store = AnalyticsStore(client, database, cluster if url else None, url is None, settings, lock_file,
                           settle_seconds=0.0 if url is None else 60.0, readers=readers,
                           read_settings={} if url else {"os_thread_priority": READ_NICE})
    store.ensure_schema()
    return store
