"""The analytics store's layout: creating its tables and views, and bringing a store from before to the current
layout when it is opened (codecs, sorting keys, LowCardinality columns, one-row granules, derived tables and
their backfills). Blocking calls, run at open and by `tally analytics rebuild` (in a thread there); the
tables themselves are described in storage/clickhouse_schema.py.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from storage.clickhouse_schema import (
    ACTOR_KEY,
    CODECS,
    DAY_STATES,
    ENGAGEMENT_FROM_INPUT,
    ENGAGEMENT_ORDER,
    INPUT_TABLE,
    KEYED_FROM_INPUT,
    LC,
    LC_SITE_COLUMNS,
    ORIGIN,
    ORIGIN_TABLE,
    ROW_GRANULES,
    SESSION_STATES,
    SITE_FROM_INPUT,
    SITE_ORDER,
    STATE_TABLES,
    TABLES,
    VISIT_COLUMNS,
)

if TYPE_CHECKING:
    from storage.clickhouse import AnalyticsStore

log = logging.getLogger("tally.analytics")

DERIVED = "derived from site_events"  # the comment of a derived table once its backfill is complete
COMPUTED = ("MATERIALIZED", "ALIAS")  # default kinds of columns an INSERT cannot write


class TableInfo(NamedTuple):
    comment: str
    sorting_key: str
    engine_full: str


def ensure_schema(store: AnalyticsStore) -> None:
    """Create the store's tables and views, and bring a store from before to the current layout."""
    store.command_sync(f"CREATE DATABASE IF NOT EXISTS {store.database}{store.on_cluster}")
    # Stores from before `events_in` hashed visitors and sessions in Python (BLAKE2b): their rows would
    # not group with new ones, so they are emptied and refilled from PostgreSQL (`refill_needed`).
    store.refill_needed = bool(store.client.command(f"EXISTS TABLE {store.local_table('site_events')}")) \
        and not store.client.command(f"EXISTS TABLE {store.database}.events_in")
    if store.refill_needed:
        for name in TABLES:
            store.command_sync(f"TRUNCATE TABLE IF EXISTS {store.local_table(name)}{store.on_cluster}")
    _regranulate(store)
    for name, (body, shard_key, engine) in TABLES.items():
        store.command_sync(f"CREATE TABLE IF NOT EXISTS {store.local_table(name)}{store.on_cluster} "
                           + body.format(engine=engine))
        if store.cluster:
            _create_distributed(store, store.table(name), store.local_table(name), shard_key)
    _resort(store, "site_events", SITE_ORDER)
    _resort(store, "site_engagement", ENGAGEMENT_ORDER)
    columns = {name: _columns(store, name) for name in CODECS}
    # Stores from before a column became LowCardinality get it converted (a mutation of that column).
    strings = [c for c in LC_SITE_COLUMNS if columns["site_events"][c][0] == "String"]
    if strings:
        _alter(store, "site_events", ", ".join(f"MODIFY COLUMN {c} {LC}" for c in strings))
    # A store from before the actor key gets the column; parts written before it compute it from the
    # actor on read until the mutation has stored it in them.
    if "actor_key" not in columns["keyed_events"]:
        _alter(store, "keyed_events", f"ADD COLUMN IF NOT EXISTS actor_key UInt64 MATERIALIZED {ACTOR_KEY}")
        store.command_sync(f"ALTER TABLE {store.local_table('keyed_events')}{store.on_cluster} "
                           "MATERIALIZE COLUMN actor_key")
    # A sessions table from before the visit columns (visitor, entry and exit page) gains them with
    # neutral defaults. Derived tables are complete once their table comment says so: until then (a new
    # table, one from before its columns, or a backfill cut short) their view is (re)created, so that
    # it fills every column, and they are derived again from the events already held (min/max and set
    # union merge with the rows already there), then marked.
    missing = [c for c in VISIT_COLUMNS if c not in columns["site_sessions"]]
    if missing:
        _alter(store, "site_sessions", ", ".join(f"ADD COLUMN IF NOT EXISTS {c} {VISIT_COLUMNS[c]}" for c in missing))
    # Cached states from before they held goals gain their event counts (a cache: rows without one are
    # never read for goals, whose dim is new).
    if "events" not in columns["site_window_keys"]:
        _alter(store, "site_window_keys", "ADD COLUMN IF NOT EXISTS events UInt64")
    # Stores from before a column's codec get it: parts written or merged from then on use it
    # (`tally analytics rebuild` rewrites every part). Columns added just above have theirs.
    for name, codecs in CODECS.items():
        changed = [f"MODIFY COLUMN {c} {codec}" for c, codec in codecs.items()
                   if c in columns[name] and columns[name][c][1] != codec]
        if changed:
            _alter(store, name, ", ".join(changed))
    # On the local tables: in cluster mode each shard keeps the sessions and days of its own sites.
    for name, states, backfill in (("site_sessions", SESSION_STATES, backfill_sessions),
                                   ("site_days", DAY_STATES, backfill_days)):
        view = f"{store.database}.{name}_mv{store.on_cluster}"
        complete = _table_info(store, name).comment == DERIVED
        if not complete:
            store.command_sync(f"DROP VIEW IF EXISTS {view}")
        store.command_sync(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {view} TO {store.local_table(name)} AS "
                           + states.format(source=store.local_table("site_events")))
        if not complete:
            backfill(store)
            store.command_sync(f"ALTER TABLE {store.local_table(name)}{store.on_cluster} MODIFY COMMENT '{DERIVED}'")
    store.command_sync(f"CREATE TABLE IF NOT EXISTS {store.local_table(ORIGIN)}{store.on_cluster} {ORIGIN_TABLE}")
    if store.cluster:
        _create_distributed(store, store.table(ORIGIN), store.local_table(ORIGIN), "0")
    # Where inserts land (on each node in cluster mode); its views write through the Distributed tables.
    store.command_sync(f"CREATE TABLE IF NOT EXISTS {store.database}.events_in{store.on_cluster} {INPUT_TABLE}")
    for view, target, select in (("site_events_in_mv", "site_events", SITE_FROM_INPUT),
                                 ("site_engagement_in_mv", "site_engagement", ENGAGEMENT_FROM_INPUT),
                                 ("keyed_events_in_mv", "keyed_events", KEYED_FROM_INPUT)):
        query = select.format(source=f"{store.database}.events_in")
        store.command_sync(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {store.database}.{view}{store.on_cluster} "
                           f"TO {store.table(target)} AS " + query)
        # A store from before a derivation changed (the page key with hash routes, the referrer host) gets
        # the view's query replaced in place, so no insert meets a missing view; rows written before keep
        # theirs until a rebuild.
        same = store.client.query(
            "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {view:String} "
            "AND as_select = formatQuerySingleLine({query:String})",
            parameters={"db": store.database, "view": view, "query": query}).result_rows[0][0]
        if not same:
            log.warning("changing how %s.%s derives its rows: rows written before keep theirs until "
                        "`tally analytics rebuild`", store.database, view)
            store.command_sync(f"ALTER TABLE {store.database}.{view}{store.on_cluster} MODIFY QUERY " + query)


def _resort(store: AnalyticsStore, name: str, order: str) -> None:
    """A table from before its sorting key changed gets its rows copied, in blocks, into a table of the
    current layout, which then takes its name. The views that read or write it go by name, so they
    follow; the tables derived from it need nothing (the rows are the same). A copy cut short leaves
    the old table in place and is started again at the next open. In cluster mode every shard copies
    its own rows, through a Distributed table over the shards' copies (below)."""
    table = store.local_table(name)
    staging, spread = f"{table}_resorted", f"{table}_resorted_all"
    for leftover in (spread, staging):
        store.command_sync(f"DROP TABLE IF EXISTS {leftover}{store.on_cluster}")
    key = _table_info(store, name).sorting_key
    if key in ("", order):  # no such table, or already sorted so
        return
    log.warning("re-sorting %s by (%s): a copy of its rows, once", table, order)
    body, shard_key, engine = TABLES[name]
    store.command_sync(f"CREATE TABLE {staging}{store.on_cluster} " + body.format(engine=engine))
    # By name, not position: columns added to the old table by ALTER sit at its end. Stored ones only.
    stored = {c for c, (_, _, kind) in _columns_of(store, staging).items() if kind not in COMPUTED}
    kept = ", ".join(c for c in _columns(store, name) if c in stored)
    # In parts of 100,000 rows, each sorted and written before the next is read, within the query bound.
    settings = {"max_block_size": 65_536, "min_insert_block_size_rows": 100_000,
                "min_insert_block_size_bytes": 0, "max_insert_threads": 1}
    target, source = staging, table
    if store.cluster:
        # An INSERT into a Distributed table that SELECTs from another of the same cluster runs on every
        # shard, from its local table into its local table: each shard's rows stay on it, copied there.
        _create_distributed(store, spread, staging, shard_key)
        target, source = spread, store.table(name)
        settings |= {"parallel_distributed_insert_select": 2}
    store.command_sync(f"INSERT INTO {target} ({kept}) SELECT {kept} FROM {source}", settings=settings)
    store.command_sync(f"EXCHANGE TABLES {table} AND {staging}{store.on_cluster}")
    for done in ([spread] if store.cluster else []) + [staging]:
        store.command_sync(f"DROP TABLE {done}{store.on_cluster}")


def _create_distributed(store: AnalyticsStore, table: str, over: str, shard_key: str) -> None:
    """A Distributed table `table` over each shard's `over` (both database-qualified), rows placed by
    `shard_key`."""
    store.command_sync(f"CREATE TABLE IF NOT EXISTS {table}{store.on_cluster} AS {over} ENGINE = Distributed("
                       f"{store.cluster}, {store.database}, {over.split('.', 1)[1]}, {shard_key})")


def _regranulate(store: AnalyticsStore) -> None:
    """Tables of large states from before their one-row granules are dropped, to be made again: the
    window visitors are a cache, and site_days, without its comment, is derived again from the events
    (at 10M events, 3 s once). In cluster mode each shard's table is dropped; the Distributed table over
    them, whose columns are the same, stays."""
    for name in STATE_TABLES:
        engine = _table_info(store, name).engine_full
        if not engine or ROW_GRANULES in engine:
            continue
        log.warning("making %s again with one row per granule", name)
        store.command_sync(f"DROP TABLE {store.local_table(name)}{store.on_cluster}")


def _table_info(store: AnalyticsStore, name: str) -> TableInfo:
    """The comment, sorting key and engine clause of the table holding the rows (all '' when it does not
    exist)."""
    table = store.local_table(name).split(".", 1)[1]
    rows = store.query_sync("SELECT comment, sorting_key, engine_full FROM system.tables "
                            "WHERE database = {d:String} AND name = {t:String}", {"d": store.database, "t": table})
    return TableInfo(*rows[0]) if rows else TableInfo("", "", "")


def _columns(store: AnalyticsStore, name: str) -> dict[str, tuple[str, str, str]]:
    """The columns of the table holding the rows: name -> (type, compression codec, default kind)."""
    return _columns_of(store, store.local_table(name))


def _columns_of(store: AnalyticsStore, table: str) -> dict[str, tuple[str, str, str]]:
    return {n: (t, c, k) for n, t, c, k in store.query_sync(
        "SELECT name, type, compression_codec, default_kind FROM system.columns WHERE database = {d:String} "
        "AND table = {t:String}", {"d": store.database, "t": table.split(".", 1)[1]})}


def _alter(store: AnalyticsStore, name: str, clause: str) -> None:
    """ALTER the table holding the rows and, in cluster mode, its Distributed table (whose columns
    must match), with one clause list."""
    for target in [store.local_table(name)] + ([store.table(name)] if store.cluster else []):
        store.command_sync(f"ALTER TABLE {target}{store.on_cluster} {clause}")


def backfill_sessions(store: AnalyticsStore, since: datetime | None = None) -> None:
    """(Re)derive the session-day rows of every day from `since`'s (all days when None) from site_events.
    Rows the view writes meanwhile are merged with these by min/max, so running both is harmless."""
    _backfill(store, "site_sessions", SESSION_STATES, since)


def backfill_days(store: AnalyticsStore, since: datetime | None = None) -> None:
    """The same for site_days (visitor sets are merged by union; `written` becomes now)."""
    _backfill(store, "site_days", DAY_STATES, since)


def _backfill(store: AnalyticsStore, name: str, states: str, since: datetime | None) -> None:
    # Through the Distributed tables in cluster mode: the rows land on their site's shard, as events do.
    # One day at a time: a day's groups fit the query's memory bound, all of a large store's do not.
    events = store.table("site_events")
    after = "" if since is None else " WHERE ts >= toStartOfDay({s:DateTime64(6, 'UTC')})"
    days = store.query_sync(f"SELECT DISTINCT toDate(ts) AS d FROM {events}{after} ORDER BY d",
                            {"s": since} if since is not None else None)
    for (day,) in days:
        source = f"(SELECT * FROM {events} WHERE toDate(ts) = {{d:Date}})"
        store.command_sync(f"INSERT INTO {store.table(name)} " + states.format(source=source), {"d": day})
