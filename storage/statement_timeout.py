"""Reads bounded by PostgreSQL's own statement timeout, where a stall is told apart from a slow statement.

A statement timeout is PostgreSQL's: it cancels the statement (QueryCanceledError), which says the read was too
slow. A stalled server (a process stopped, a hung disk, a network path dropping packets) cannot apply it, and the
read waited for asyncpg's 60 s command timeout, then looked like a slow one: a report answered 504 and its
scheduled delivery failed for good. Here each statement is waited for at most its timeout plus
STALL_GRACE_SECONDS; one PostgreSQL has not ended by then closes its connection and raises PostgresStalled,
which the HTTP edge answers as an unreachable PostgreSQL (503, Retry-After) and a delivery retries.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import asyncpg

from storage.bounded_pool import stalls

# Far beyond PostgreSQL's own cancel, which comes at the timeout.
STALL_GRACE_SECONDS = 5.0


def timeout_before(seconds_left: float) -> float | None:
    """PostgreSQL's timeout for a read that must end within `seconds_left` (a report run's deadline): two graces
    before it, so that a stall (not ended a grace after the timeout) is told apart before the deadline takes it for
    a slow read. None where that would leave the read less than half the time (a deadline under 20 s): the deadline
    alone then, as before, rather than fail sooner than it could finish."""
    seconds = seconds_left - 2 * STALL_GRACE_SECONDS
    return seconds if seconds >= seconds_left / 2 else None


@contextlib.asynccontextmanager
async def own_timeout(conn: asyncpg.Connection, seconds: float) -> AsyncIterator[float]:
    """A read-only transaction whose statements PostgreSQL ends after `seconds` (statement_timeout). Yields how
    long to wait for each (the `timeout=` of every call made inside); a statement not ended by then raises
    PostgresStalled, with the connection closed. BEGIN and ROLLBACK by hand, not conn.transaction(): its ROLLBACK
    after a stalled statement would wait for the command timeout again, and on a closed connection it raises over
    the stall. A ROLLBACK ends it, which also undoes every SET LOCAL made inside."""
    bound = seconds + STALL_GRACE_SECONDS
    with _stall_closes(conn, bound):
        await conn.execute("BEGIN READ ONLY", timeout=bound)
    try:
        with _stall_closes(conn, bound):
            await conn.execute("SELECT set_config('statement_timeout', $1, true)", str(max(1, round(seconds * 1000))),
                               timeout=bound)
            yield bound
    finally:
        if not conn.is_closed():
            with _stall_closes(conn, bound):
                await conn.execute("ROLLBACK", timeout=bound)


@contextlib.contextmanager
def _stall_closes(conn: asyncpg.Connection, bound: float) -> Iterator[None]:
    with stalls(bound, f"PostgreSQL did not end a statement, {STALL_GRACE_SECONDS:g}s past its statement timeout,"):
        try:
            yield
        except TimeoutError:
            conn.terminate()  # its statement may still be running: of no further use, and the pool drops it at once
            raise
