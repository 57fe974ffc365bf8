"""The mirror from PostgreSQL (the system of record) to the analytics store.

Committed events are listed in `analytics_outbox` by a trigger in their own transaction (migration 0017; one
row per statement since 0021).
A round takes the lowest outbox rows, COPYs their events out of PostgreSQL as CSV, inserts that into
ClickHouse as it streams (in pieces within the store's memory bound: storage/analytics_pieces) and deletes
exactly those outbox rows, in one REPEATABLE READ transaction (so the COPY and the DELETE see the same rows),
under an advisory lock, so rounds of all processes run one at a time. A crash before the COMMIT leaves the
rows listed and the next round writes them again; the store's ReplacingMergeTree tables collapse such copies
by event id and every read uses FINAL, so nothing counts twice. Erasures are queued the same way
(`analytics_erasures`) and applied in a round before its inserts: rounds run one at a time, so a batch read
before an erasure committed was written by an earlier round and is deleted, and this round's COPY, in the
erasure's snapshot, holds only the events that survived it.

No event passes through Python one by one: PostgreSQL writes the CSV, and the store's `events_in` views
derive every column the reads need (page key, referrer host, visitor hash) from the raw fields. `rebuild`
uses the same path on the `events` table alone; the store's views also derive the session-day rows
(`site_sessions`) and the day rows (`site_days`), and reads count ended days again (`site_day_counts`,
emptied here) when they need them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

import asyncpg

from storage import analytics_moves, analytics_pieces, clickhouse_layout, clickhouse_schema
from storage.clickhouse import AnalyticsStore

_LOCK = (7_264_002, 1)  # advisory lock of mirror rounds (migrate.py uses 7_264_001)
_OWNER = (7_264_003, 1)  # held for its lifetime by the process whose embedded store this database feeds
_REBUILDING = (7_264_004, 1)  # held by a rebuild while its row in analytics_rebuilds stands (migration 0022)


class StoreClaimed(RuntimeError):
    """Another process already mirrors this database into an embedded store of its own."""


# storage.clickhouse.INPUT_COLUMNS, in its order; ts in UTC as ClickHouse reads a DateTime64.
EVENT_FIELDS = (
    "e.id, e.workspace_id, e.env, e.site_id, e.name, to_char(e.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), "
    "e.user_id, e.anonymous_id, e.session_id, e.ip_hash, e.path, e.referrer, e.country, e.browser, "
    "e.browser_version, e.os, e.os_version, e.device, e.utm_source, e.utm_medium, e.utm_campaign, e.utm_term, "
    "e.utm_content, e.source, e.channel, e.region, e.city, e.properties::text"
)
# An outbox row lists one statement's events of one (workspace, env) (migration 0021). A round takes the
# lowest rows up to the first that reaches `$1` events (at least one row, however large).
_BOUND = (
    "SELECT max(seq) FROM (SELECT seq, sum(events) OVER (ORDER BY seq) - events AS before "
    "FROM (SELECT seq, events FROM analytics_outbox ORDER BY seq LIMIT $1) a) s WHERE before < $1"
)
# One index probe per listed event, whatever the statistics say: with stale ones (a fresh table, right after
# a refill) the planner chose a join that scanned every partition of events, every round. An event the
# keyed trigger dropped in its own statement (its user was erased) is listed but not found.
_OUTBOX_EVENTS = (
    f"SELECT {EVENT_FIELDS} FROM analytics_outbox o CROSS JOIN LATERAL unnest(o.stamps, o.ids) AS k (ts, id) "
    "CROSS JOIN LATERAL (SELECT * FROM events x "
    "WHERE x.workspace_id = o.workspace_id AND x.env = o.env AND x.ts = k.ts AND x.id = k.id LIMIT 1) e "
    "WHERE o.seq <= $1"
)
_DONE = (
    "WITH done AS (DELETE FROM analytics_outbox WHERE seq <= $1 RETURNING events) "
    "SELECT coalesce(sum(events), 0) FROM done"
)
_ERASURES = "SELECT seq, workspace_id, env, user_id FROM analytics_erasures ORDER BY seq FOR UPDATE"
_ERASED = "DELETE FROM analytics_erasures WHERE seq = ANY($1::bigint[])"
# The users' events and the ids' anonymous ones (storage/events.erase_user); a user id "anon:x" is not x.
# Every queued erasure in one DELETE (as the parameters' size allows: the store's delete_rows): each DELETE is
# a mutation of every part of the table, whatever it matches.
_ERASED_ROWS = ("(workspace_id, env, user_id) IN {users:Array(Tuple(UInt64, String, String))} "
                "OR user_id = '' AND (workspace_id, env, actor) IN {actors:Array(Tuple(UInt64, String, String))}")
_EVENTS_BETWEEN = f"SELECT {EVENT_FIELDS} FROM events e WHERE e.ts >= $1 AND e.ts < $2"
_EVENTS_OF_SITE = f"SELECT {EVENT_FIELDS} FROM events e WHERE e.site_id = $1"
_EVENTS_OF_WORKSPACE = f"SELECT {EVENT_FIELDS} FROM events e WHERE e.workspace_id = $1"
_SPAN = "SELECT min(ts), max(ts) FROM events WHERE ts >= coalesce($1::timestamptz, '-infinity')"
_REQUEUE = (
    "INSERT INTO analytics_outbox (workspace_id, env, stamps, ids, events) "
    "SELECT workspace_id, env, ARRAY[ts], ARRAY[id], 1 FROM events WHERE ts >= coalesce($1::timestamptz, '-infinity')"
)


async def copy_events(conn: asyncpg.Connection, query: str, *args: object) -> bytes:
    """The CSV of a SELECT of EVENT_FIELDS, written by PostgreSQL (asyncpg binds the arguments). Chunks are
    kept by a coroutine: given a file object, asyncpg writes each chunk (one per socket read) through the
    thread pool, a hand-off and a wake-up of the event loop each."""
    chunks: list[bytes] = []

    async def keep(chunk: bytes) -> None:
        chunks.append(chunk)

    await conn.copy_from_query(query, *args, output=keep, format="csv")
    return b"".join(chunks)


async def site_events_csv(conn: asyncpg.Connection, site_id: str) -> bytes:
    """Every stored event of one site, as the mirror sends them (tests write batches twice with it)."""
    return await copy_events(conn, _EVENTS_OF_SITE, site_id)


async def workspace_events_csv(conn: asyncpg.Connection, workspace_id: int) -> bytes:
    """Every stored event of one workspace, as the mirror sends them."""
    return await copy_events(conn, _EVENTS_OF_WORKSPACE, workspace_id)


async def write_events(store: AnalyticsStore, data: bytes) -> None:
    if data:
        await asyncio.to_thread(store.insert_events_csv_sync, data)


async def claim_embedded_store(conn: asyncpg.Connection) -> None:
    """Hold, on `conn` and for as long as it is open, the claim of the process whose embedded store this
    database feeds. Two processes with separate embedded stores would split the outbox between them, each
    store missing what the other mirrored: the second is refused. (A ClickHouse server is shared instead.)"""
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *_OWNER):
        raise StoreClaimed("another Tally process already mirrors this database into its own embedded analytics "
                           "store; run one process per database, or share a ClickHouse server "
                           "(TALLY_ANALYTICS_URL) between processes")


# --- which database the store mirrors ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Origin:
    """A PostgreSQL database, as a store records the one it mirrors: the cluster's system identifier (set by
    initdb, so another server, a restored copy or a re-created cluster differ) and the database's name and
    oid (a database dropped and created again under its name differs too)."""
    system_identifier: str
    database: str
    oid: int

    def __str__(self) -> str:
        return f'"{self.database}" (oid {self.oid}) of the PostgreSQL cluster {self.system_identifier}'


class StoreMismatch(RuntimeError):
    """The analytics store mirrors another PostgreSQL database than the one it was opened with."""

    def __init__(self, recorded: Origin, current: Origin) -> None:
        super().__init__(f"the store mirrors the database {recorded}, not {current}")
        self.recorded, self.current = recorded, current


async def postgres_origin(conn: asyncpg.Connection) -> Origin:
    row = await conn.fetchrow(
        "SELECT (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier, "
        "current_database() AS database, "
        "(SELECT oid FROM pg_database WHERE datname = current_database())::bigint AS oid")
    return Origin(row["system_identifier"], row["database"], row["oid"])


async def recorded_origins(store: AnalyticsStore) -> set[Origin]:
    rows = await store.query(f"SELECT DISTINCT system_identifier, database, database_oid "
                             f"FROM {store.table(clickhouse_schema.ORIGIN)}")
    return {Origin(*row) for row in rows}


async def record_origin(store: AnalyticsStore, origin: Origin) -> None:
    """Make `origin` the database the store mirrors (the only one recorded)."""
    await store.command(f"TRUNCATE TABLE {store.local_table(clickhouse_schema.ORIGIN)}{store.on_cluster}")
    await store.command(
        f"INSERT INTO {store.table(clickhouse_schema.ORIGIN)} (system_identifier, database, database_oid, adopted) "
        "VALUES ({s:String}, {d:String}, {o:UInt32}, now64(3))",
        {"s": origin.system_identifier, "d": origin.database, "o": origin.oid})


async def check_origin(conn: asyncpg.Connection, store: AnalyticsStore) -> Origin | None:
    """Refuse (StoreMismatch) a store that mirrors another database than `conn`'s: its counts would be that
    database's events, and this one's would be missing. A store that records none (new, or from before the
    record) adopts this one; returns it then, else None."""
    current = await postgres_origin(conn)
    recorded = await recorded_origins(store)
    if not recorded:
        await record_origin(store, current)
        return current
    if recorded != {current}:
        raise StoreMismatch(min(recorded, key=str), current)
    return None


# --- rounds -----------------------------------------------------------------------------------------

async def mirror_round(conn: asyncpg.Connection, store: AnalyticsStore, limit: int) -> int:
    """Mirror the outbox rows of about `limit` events and apply queued erasures; returns the events listed
    in the rows handled."""
    # Taken before the transaction: its snapshot must not predate the previous round's commit.
    await conn.execute("SELECT pg_advisory_lock($1, $2)", *_LOCK)
    try:
        async with conn.transaction(isolation="repeatable_read"):
            # The COPY's cost estimate (unnest guesses 10 events a row) passes jit_above_cost in rounds of a
            # few hundred rows: JIT compiling took ~14 ms a round, more than probing 10,000 events.
            await conn.execute("SET LOCAL jit = off")
            # Erasures before this round's inserts: the rows they delete were written by earlier rounds, and
            # this round's COPY (the same snapshot) holds none of the erased events, only the user's events
            # committed after the erasure, which are kept (deleted after the inserts, they were lost).
            erasures = await conn.fetch(_ERASURES)
            await store.delete_rows("keyed_events", _ERASED_ROWS,
                                    [(e["workspace_id"], e["env"], e["user_id"]) for e in erasures], param="users",
                                    derived=lambda users: {"actors": [(w, env, f"anon:{u}") for w, env, u in users]})
            if erasures:
                await conn.execute(_ERASED, [e["seq"] for e in erasures])
            bound = await conn.fetchval(_BOUND, limit)
            done = 0
            if bound is not None:
                await analytics_pieces.copy_into(conn, store, _OUTBOX_EVENTS, bound)
                done = int(await conn.fetchval(_DONE, bound))
                await analytics_moves.apply_moves(conn, store)  # only written rows make a move ready
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, $2)", *_LOCK)
    return done


async def queue_erasure(conn: asyncpg.Connection, workspace_id: int, env: str, user_id: str) -> None:
    """Called inside the erasure's transaction."""
    await conn.execute("INSERT INTO analytics_erasures (workspace_id, env, user_id) VALUES ($1, $2, $3)",
                       workspace_id, env, user_id)


# --- status and rebuild -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Status:
    pending: int  # committed events not yet in the store
    lag_seconds: float  # age of the oldest of them (0 when none)
    postgres_events: int
    store_site_events: int
    store_keyed_events: int

    def json(self) -> dict:
        return {"pending": self.pending, "lag_seconds": round(self.lag_seconds, 3),
                "postgres_events": self.postgres_events,
                "analytics_events": self.store_site_events + self.store_keyed_events,
                "analytics_site_events": self.store_site_events,
                "analytics_keyed_events": self.store_keyed_events}


async def lag(conn: asyncpg.Connection) -> tuple[int, float]:
    row = await conn.fetchrow(
        "SELECT coalesce(sum(events), 0) AS n, "
        "coalesce(extract(epoch FROM now() - min(queued_at)), 0)::float8 AS lag "
        "FROM analytics_outbox"
    )
    return row["n"], row["lag"]


async def status(conn: asyncpg.Connection, store: AnalyticsStore) -> Status:
    pending, age = await lag(conn)
    pg = await conn.fetchval("SELECT count(*) FROM events")
    site = 0
    for table in ("site_events", "site_engagement"):  # a site event is in one of them (clickhouse_schema)
        site += (await store.query(f"SELECT count() FROM {store.table(table)} FINAL"))[0][0]
    keyed = (await store.query(f"SELECT count() FROM {store.table('keyed_events')} FINAL"))[0][0]
    return Status(pending, age, pg, site, keyed)


async def rebuild(conn: asyncpg.Connection, store: AnalyticsStore, since: datetime | None = None) -> int:
    """Re-mirror every event (or those at or after `since`) from PostgreSQL; returns the events written.
    Takes the mirror lock, so no round runs meanwhile; the outbox keeps what commits during the rebuild.
    Goes a month at a time (the events partitions), inserting each in pieces (storage/analytics_pieces). Stands
    in analytics_rebuilds until done, so an interrupted rebuild is made good (resume_interrupted)."""
    await conn.execute("SELECT pg_advisory_lock($1, $2)", *_REBUILDING)
    try:
        marker = await conn.fetchval("INSERT INTO analytics_rebuilds (since) VALUES ($1) RETURNING id", since)
        written = await _rebuild(conn, store, since)
        # Done: its own row, and those of interrupted rebuilds this one covered.
        await conn.execute("DELETE FROM analytics_rebuilds WHERE id = $1 OR $2::timestamptz IS NULL OR since >= $2",
                           marker, since)
        return written
    finally:
        # A connection broken by the failure has lost the lock already (the session ended with it).
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await conn.execute("SELECT pg_advisory_unlock($1, $2)", *_REBUILDING)


async def _rebuild(conn: asyncpg.Connection, store: AnalyticsStore, since: datetime | None) -> int:
    for name in ("site_sessions", "site_days", "site_day_counts", "site_window_visitors", "site_window_keys",
                 "site_events", "site_engagement", "keyed_events"):
        if since is None:
            await store.command(f"TRUNCATE TABLE IF EXISTS {store.local_table(name)}{store.on_cluster}")
        elif name in ("site_window_visitors", "site_window_keys"):
            await store.delete_where(name, "last >= toDate({s:DateTime64(6, 'UTC')})", {"s": since})
        elif name in ("site_sessions", "site_days", "site_day_counts"):  # whole days: derived again below
            await store.delete_where(name, "day >= toDate({s:DateTime64(6, 'UTC')})", {"s": since})
        else:
            await store.delete_where(name, "ts >= {s:DateTime64(6, 'UTC')}", {"s": since})
    if since is None:  # emptied: from now on it mirrors this database (and an interrupted rebuild resumes here)
        await record_origin(store, await postgres_origin(conn))
    written = 0
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", *_LOCK)
        erased = await conn.fetch(_ERASURES)
        if erased:  # nothing of theirs is left in PostgreSQL to copy
            await conn.execute(_ERASED, [e["seq"] for e in erased])
        first, last = await conn.fetchrow(_SPAN, since)
        month = first and first.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        while month is not None and month <= last:
            following = (month + timedelta(days=32)).replace(day=1)
            written += await analytics_pieces.copy_into(conn, store, _EVENTS_BETWEEN, max(month, since or month),
                                                        following)
            month = following
    if since is not None:  # the sessions and visitors of the day of `since` also hold events from before it
        await asyncio.to_thread(clickhouse_layout.backfill_sessions, store, since)
        await asyncio.to_thread(clickhouse_layout.backfill_days, store, since)
    return written


async def refill(conn: asyncpg.Connection) -> int:
    """Queue every stored event for the mirror again (after the store was emptied); returns how many."""
    async with conn.transaction():
        return await _requeue(conn, None)


async def _requeue(conn: asyncpg.Connection, start: datetime | None) -> int:
    """In the caller's transaction, under the mirror lock: queue the stored events from `start` again (every
    event when None, into an emptied outbox, since each is queued here); returns how many."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", *_LOCK)
    if start is None:
        await conn.execute("DELETE FROM analytics_outbox")
    return int((await conn.execute(_REQUEUE, start)).split()[-1])


async def resume_interrupted(conn: asyncpg.Connection) -> int:
    """Queue again, for the mirror, the events an interrupted rebuild had taken out of the store and not
    written back: those from the start of the UTC day of its `since` (the day's session and visitor rows
    went whole), or every event. Returns how many were queued (0 when no rebuild was interrupted, or one is
    still running)."""
    async with conn.transaction():
        if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1, $2)", *_REBUILDING):
            return 0  # a rebuild is running: its row is not an interrupted one
        rows = await conn.fetch("DELETE FROM analytics_rebuilds RETURNING since")
        if not rows:
            return 0
        starts = [r["since"] and datetime.combine(r["since"].astimezone(UTC).date(), time(), UTC) for r in rows]
        return await _requeue(conn, None if None in starts else min(starts))
