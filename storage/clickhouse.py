"""The analytics store: ClickHouse tables reached through clickhouse-connect, either embedded (chDB, an
in-process ClickHouse registered as clickhouse-connect's `chdb` backend) or a ClickHouse server/cluster.

Blocking client calls run in a worker thread so the event loop keeps answering. Every query carries
bounded `max_threads` and `max_memory_usage`, so one report cannot take the machine. chDB allows one
open data directory per process: `open_store` is called once per process (the tests share one store).
Each client serializes the calls on its connection: writes (inserts, commands, deletes) go through one
client, one at a time, and reads through a few clients of their own (`READERS`), so that reads run beside
each other and beside the writes instead of waiting for them; storage/read_slots.py hands the read clients
out, one workspace at most all but one of them. The tables are created, and a store from before converted,
by storage/clickhouse_layout.py when the store is opened.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import queue
import re
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlsplit

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError

from storage.clickhouse_layout import ensure_schema
from storage.clickhouse_schema import (
    CSV_INPUT_SETTINGS,
    INPUT_COLUMNS,
)
from storage.read_slots import ReadSlots

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



class QueryTooSlow(ClickHouseError):
    """The store stopped a read at its time bound (`max_execution_time`, TALLY_ANALYTICS_READ_TIMEOUT_SECONDS):
    the read held one of the few read clients all that time, and would again."""


class QueryTooLarge(ClickHouseError):
    """The store refused a query for its per-query memory bound (`max_memory_usage`,
    TALLY_ANALYTICS_MAX_MEMORY_MB): the same query on the same rows is refused again, so it is not a fault to
    retry or a bug, but a read too large for the bound (a long window of a busy site)."""


def over_query_bound(exc: ClickHouseError) -> bool:
    """Whether ClickHouse refused a query for the query's own memory bound (not the server's total, which
    other queries share and a retry may pass)."""
    text = str(exc)
    return "MEMORY_LIMIT_EXCEEDED" in text and "(total)" not in text


class StoreBusy(RuntimeError):
    """The embedded store's directory is open in another process (a running server)."""


class StoreUnopenable(RuntimeError):
    """The embedded engine cannot open the store's directory (damaged, or a partial copy)."""


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
    refill_needed: bool = False  # set by clickhouse_layout.ensure_schema: the store was emptied and must be refilled
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
        self._read_slots = ReadSlots(self._reader_count) if self._reader_count else None
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
        if self._read_slots is None:
            return await asyncio.to_thread(self.query_sync, sql, params, settings)
        async with self._read_slots.held():  # a read client is free before a thread is taken (storage/read_slots.py)
            return await asyncio.to_thread(self.query_sync, sql, params, settings)

    def query_sync(self, sql: str, params: dict[str, Any] | None = None,
                   settings: dict[str, Any] | None = None) -> list[tuple]:
        reader = self.readers.get() if self._reader_count else self.client
        try:
            result = reader.query(sql, parameters=params or {},
                                  settings={**self.query_settings, **self.read_settings, **(settings or {})})
        except ClickHouseError as exc:
            if over_query_bound(exc):
                raise QueryTooLarge(str(exc)) from exc
            if "TIMEOUT_EXCEEDED" in str(exc):
                raise QueryTooSlow(str(exc)) from exc
            raise
        finally:
            if reader is not self.client:
                self.readers.put(reader)
        return result.result_rows

    async def command(self, sql: str, params: dict[str, Any] | None = None, *,
                      settings: dict[str, Any] | None = None) -> None:
        await asyncio.to_thread(self.command_sync, sql, params, settings)

    def command_sync(self, sql: str, params: dict[str, Any] | None = None,
                     settings: dict[str, Any] | None = None) -> None:
        try:
            self.client.command(sql, parameters=params or {}, settings={**self.query_settings, **(settings or {})})
        except ClickHouseError as exc:
            # The rows a read derives and caches (a day's counts, a window's visitor states) are written by the
            # read: over the bound, that write is the read's refusal, as its own query's would be.
            if over_query_bound(exc):
                raise QueryTooLarge(str(exc)) from exc
            raise

    @property
    def insert_piece_bytes(self) -> int:
        """The most CSV an insert of events should carry: an insert through `events_in` and its views takes
        about five times its CSV in memory (8 MB of 60 KB events pass the 64 MB floor of the bound, 16 MB do
        not), so a sixteenth of the bound leaves room."""
        return (self.query_settings.get("max_memory_usage") or 2**30) // 16

    def insert_events_csv_sync(self, data: bytes | BinaryIO) -> None:
        """Insert raw events (PostgreSQL CSV of INPUT_COLUMNS) through `events_in` and its views."""
        self.client.raw_insert(f"{self.database}.events_in", INPUT_COLUMNS, data, fmt="CSV",
                               settings={**self.query_settings, **CSV_INPUT_SETTINGS})

    # --- table names --------------------------------------------------------------------------------

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

    async def delete_rows(self, name: str, condition: str, rows: list[tuple], *, param: str = "rows",
                          derived: Callable[[list[tuple]], dict[str, Any]] | None = None) -> None:
        """delete_where for a list of `rows` bound as the parameter `param` (plus what `derived` makes of
        them), in as few DELETEs as PARAM_CHARS allows. A server takes a command's parameters in its URL
        (clickhouse-connect form-encodes only queries'), 1 MiB at most by default."""
        for batch in param_batches(rows):
            await self.delete_where(name, condition, {param: batch, **(derived(batch) if derived else {})})

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


# The characters of a DELETE's rows per statement (delete_rows): percent-encoded in a URL, well under a
# server's 1 MiB limit, and enough for a round's erasures or alias moves in one statement as a rule.
PARAM_CHARS = 200_000


def param_batches(rows: list[tuple]) -> Iterator[list[tuple]]:
    """`rows` in consecutive batches of at most PARAM_CHARS characters of values (a row longer alone is a
    batch of its own)."""
    batch: list[tuple] = []
    size = 0
    for row in rows:
        n = sum(len(str(v)) + 4 for v in row)  # quotes and a comma per value
        if batch and size + n > PARAM_CHARS:
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += n
    if batch:
        yield batch


# ClickHouse's HTTP ports, for a server URL that names none.
HTTP_PORTS = {"http": 8123, "https": 8443}


def server_endpoint(url: str) -> tuple[str, str, int]:
    """(interface, host, port) that the store's client reaches for a server URL. clickhouse-connect reads a
    DSN's host, port and credentials but not its scheme (it speaks TLS only on port 443 or 8443), so
    `https://host:9440` would go out as plain HTTP and `https://host` to port 8123: the scheme decides here.
    Another scheme (`clickhouse://`) keeps clickhouse-connect's rule."""
    parts = urlsplit(url)
    if parts.scheme in HTTP_PORTS:
        interface = parts.scheme
    else:
        interface = "https" if parts.port in (443, 8443) else "http"
    return interface, parts.hostname or "localhost", parts.port or HTTP_PORTS[interface]


def query_bounds(max_threads: int, max_memory_mb: int) -> dict[str, Any]:
    """The settings every query of the store carries: its threads and its memory bound. A grouping past half
    the bound, or a sort past a quarter, goes on on disk rather than fail at the bound: at 90 days and 9M events
    the page breakdown with every metric needs 0.5-1 GiB, and a site's 100k pages with paths near the
    2048-character limit took Top pages past 1 GiB (a page is a key of up to 2 KB); both answer, slower. Not
    sooner: the 30-day `page contains /blog` overview at 10M events groups ~2M visits in ~300-500 MB, and spilt
    at a quarter it took 2.4-2.7 s instead of 0.7. What else passes the bound (a join's table) still fails the
    read (QueryTooLarge)."""
    bound = max_memory_mb * 1024 * 1024
    # Copies of one event share its ts, hence its month partition: FINAL may merge each partition alone.
    # Tables are partitioned by month, and ClickHouse refuses an insert block over 100 partitions by default:
    # a batch of history (a backfill of ten years, monthly) failed its mirror round, and every round after it.
    return {"max_threads": max_threads, "max_memory_usage": bound, "max_bytes_before_external_group_by": bound // 2,
            "max_bytes_before_external_sort": bound // 4, "do_not_merge_across_partitions_select_final": 1,
            "max_partitions_per_insert_block": 0}


# The embedded engine's server settings. chDB runs its background tasks (merges, and the mutation a
# lightweight DELETE makes on every part of a table: an erasure, a Segment alias) on 2 threads with 2 tasks
# each, and the mutation reaches the parts 4 at a time with about half a second between those waves: one
# erasure took 6.6 s on a table of 48 parts, the mirror round waiting on it. Tasks queued beyond the threads
# share the same 2 threads; with room for 128 one wave reaches every part (bench/deletes.py).
ENGINE_CONFIG = """<clickhouse>
  <background_merges_mutations_concurrency_ratio>64</background_merges_mutations_concurrency_ratio>
</clickhouse>
"""


def engine_config(path: Path, extra: Path | None) -> Path:
    """ENGINE_CONFIG as the configuration file of the store at `path`, written at each open, with the file
    `extra` (the tests' cluster) merged in from config.d/ as ClickHouse merges a server's."""
    folder = path / "engine-config"
    (folder / "config.d").mkdir(parents=True, exist_ok=True)
    merged = folder / "config.d" / "extra.xml"
    if extra is None:
        merged.unlink(missing_ok=True)
    else:
        merged.write_text(extra.read_text())
    own = folder / "config.xml"
    own.write_text(ENGINE_CONFIG)
    return own


def open_store(*, url: str | None, path: Path, database: str, cluster: str | None = None,
               max_threads: int = 2, max_memory_mb: int = 1024, read_timeout_seconds: float = 30.0,
               chdb_config: Path | None = None) -> AnalyticsStore:
    """Open (blocking) the store and create its tables. url None: embedded chDB at `path`, with the server
    configuration file `chdb_config` if given (the tests define a cluster there); a cluster is a server's.
    Reads stop after `read_timeout_seconds` (QueryTooSlow; a report's run passes its own timeout): a read
    holds one of READERS clients until ClickHouse ends it, whoever stopped waiting for it."""
    if not _NAME.match(database):
        raise ValueError(f"invalid analytics database name {database!r}")
    if cluster is not None and not _NAME.match(cluster):
        raise ValueError(f"invalid analytics cluster name {cluster!r}")
    lock_file = None
    if url:
        interface, _, port = server_endpoint(url)

        def connect() -> Any:  # each client its own HTTP session: a server runs one query at a time per session
            return clickhouse_connect.get_client(dsn=url, interface=interface, port=port)
    else:
        path.mkdir(parents=True, exist_ok=True)
        lock_file = (path / "tally.lock").open("a")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise StoreBusy(f"the analytics store at {path} is open in another process (is tally serve "
                            "running?)") from None
        options = {"config-file": str(engine_config(path, chdb_config))}

        def connect() -> Any:  # each client its own connection to the process's one engine
            return clickhouse_connect.get_client(dsn=f"chdb://{path.resolve()}", chdb_options=options)
    try:
        client = connect()
    except ClickHouseError as exc:
        if lock_file is None:  # a server: the caller says which and why
            raise
        lock_file.close()
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreUnopenable(f"the embedded analytics store at {path} cannot be opened: {reason}") from None
    readers: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(READERS):
        readers.put(connect())
    settings = query_bounds(max_threads, max_memory_mb)
    store = AnalyticsStore(client, database, cluster if url else None, url is None, settings, lock_file,
                           settle_seconds=0.0 if url is None else 60.0, readers=readers,
                           read_settings={"max_execution_time": read_timeout_seconds,
                                          **({} if url else {"os_thread_priority": READ_NICE})})
    ensure_schema(store)
    return store
