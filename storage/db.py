"""The asyncpg pool, with binary JSON codecs (binary so COPY can carry jsonb).

asyncpg prepares every statement and caches it per connection. PostgreSQL then switches a prepared
statement to a generic plan after five executions when the generic plan's *estimated* cost looks no
worse; for report and filter queries whose best plan depends on the bound site, names and window, that
plan was measured at 30 s instead of 250 ms on the sixth run. `plan_cache_mode = force_custom_plan` on
every pooled connection keeps asyncpg's statement cache (no re-parse) but plans each execution for its
values; planning these statements costs well under a millisecond.

msgspec rather than orjson: it round-trips integers beyond 64 bits, which JSON allows, jsonb stores as
numeric, and orjson refuses.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable

import asyncpg
import msgspec

from storage.bounded_pool import BoundedConnection, BoundedPool

log = logging.getLogger("tally.db")

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def _encode_jsonb(value: object) -> bytes:
    return b"\x01" + _encode(value)  # jsonb binary format: version byte, then the text


def _decode_jsonb(data: bytes) -> object:
    return _decode(data[1:])


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=_encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "json", encoder=_encode, decoder=_decode, schema="pg_catalog", format="binary"
    )


SERVER_SETTINGS = {"plan_cache_mode": "force_custom_plan"}
# How long one statement may wait for PostgreSQL where no shorter bound applies (storage/bounded_pool.py).
COMMAND_TIMEOUT_SECONDS = 60.0
# For the actors' connections, which write: the statements of the events triggers (migrations 0009 and
# 0017) read the statement's transition table, and the others an actor runs (profile and Segment ledger
# upserts) go by primary key, so no plan of theirs depends on values, while replanning the triggers' on
# every COPY cost PostgreSQL ~10% of its CPU per keyed event (25-event batches). Set when the connection
# is opened, so taking one from the writers' pool costs no statement.
WRITER_SETTINGS = {"plan_cache_mode": "auto"}


async def connect(*args: object, **kwargs: object) -> asyncpg.Connection:
    """asyncpg.connect, where a Unix socket that is gone is said as what it means: nothing listens there. An
    embedded PostgreSQL that shut down (stopped, or after a recovery that failed on a full disk) removes its
    socket, and asyncpg let the connect's FileNotFoundError through, which names no dependency: every request
    answered 500 with a traceback rather than the outage's 503. (A file that is missing, a certificate say,
    names itself and is left as it is.)"""
    try:
        return await asyncpg.connect(*args, **kwargs)
    except FileNotFoundError as exc:
        if exc.filename is not None:
            raise
        raise ConnectionRefusedError(errno.ECONNREFUSED, "PostgreSQL's Unix socket is gone: no server listens "
                                     "there") from exc


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 10, server_settings: dict = SERVER_SETTINGS,
                      reset: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
                      bounded: bool = False) -> asyncpg.Pool:
    """A pool of connections with the app's codecs; `reset` None: asyncpg's default reset on release. `bounded`:
    its queries and its waits for a connection take the caller's context's bound (storage/bounded_pool.py)."""
    options = {"min_size": min_size, "max_size": max_size, "init": init_connection, "reset": reset,
               "connect": connect, "command_timeout": COMMAND_TIMEOUT_SECONDS, "server_settings": server_settings}
    if bounded:  # the pool asyncpg.create_pool makes (its defaults spelled out), of the classes that apply the bound
        return await BoundedPool(dsn, connection_class=BoundedConnection, record_class=asyncpg.Record, init_size=None,
                                 max_queries=50000, max_inactive_connection_lifetime=300.0, setup=None, loop=None,
                                 **options)
    return await asyncpg.create_pool(dsn, **options)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The writers' pool's reset: nothing beyond asyncpg's own (a ROLLBACK of an open transaction)."""


async def create_writer_pool(dsn: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
    """The actors' own pool. Its connections only run the actors' writes: COPY and INSERT ... ON CONFLICT,
    each a statement or a transaction of its own; the erasure and partition locks they take are
    transaction-scoped (pg_advisory_xact_lock*, migrations 0001, 0009, 0012, 0015), and they never SET,
    LISTEN, DECLARE a cursor or make temporary tables. So a released connection holds no session state,
    and the default reset (`SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`, a round
    trip each time an actor runs dry) is skipped: asyncpg still rolls back a transaction left open. Anything
    else that changes session state must not use this pool."""
    return await create_pool(dsn, min_size=min_size, max_size=max_size, server_settings=WRITER_SETTINGS,
                             reset=_keep_session)


def maintaining_pool() -> asyncpg.Pool | None:
    """The pool whose connection floor the running task is restoring (asyncpg's maintenance task, which logs
    each failed attempt), else None: lets a log filter tell one pool's records from another's."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return None
    frame = getattr(task.get_coro(), "cr_frame", None) if task is not None else None
    owner = frame.f_locals.get("self") if frame is not None else None
    return owner if isinstance(owner, asyncpg.Pool) else None


async def close_pool(pool: asyncpg.Pool, grace_seconds: float = 10) -> None:
    """Close gracefully, but never wait forever: asyncpg's close() waits for every acquired connection to
    come back, and one leaked by a cancelled task would hold shutdown (and a test's teardown) for good."""
    try:
        async with asyncio.timeout(grace_seconds):
            await pool.close()
    except TimeoutError:
        log.warning("connection pool still had connections in use after %gs; terminated", grace_seconds)
        pool.terminate()
