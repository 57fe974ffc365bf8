"""A pool whose waits for PostgreSQL are bounded where the caller's context says so (CALL_BOUND).

A PostgreSQL that neither fails nor answers (a server process stopped, a network path that drops packets, a
hung disk) held every query for asyncpg's 60 s command timeout, and the waits for a connection behind those
queries had no bound at all: a request that reads (an API key's lookup, the event list, a site's first event)
hung for a minute and then answered 500. The HTTP edge sets CALL_BOUND for each request; in that context each
query on a bounded pool's connections, and each wait for one of them, gives up after the bound with
PostgresStalled, which the edge answers as an unreachable PostgreSQL (503, Retry-After). An explicit `timeout=`
wins; background work (timers, started outside any request) has no bound and keeps the command timeout, while a
task a request starts inherits the request's (the mirror's catch-up a read waits for); a request whose work is
long by nature (an erasure) takes a longer one with bounded_by().
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import asyncpg

# Seconds each query, and each wait for a connection, of a bounded pool may take in this context; None: the
# pool's command timeout, and no bound on the wait for a connection.
CALL_BOUND: ContextVar[float | None] = ContextVar("postgres_call_bound", default=None)


class PostgresStalled(ConnectionError):
    """PostgreSQL gave no answer, or no connection came free, within CALL_BOUND: an outage like an unreachable
    server (a ConnectionError, so common.outages.POSTGRES_UNREACHABLE takes it)."""


@contextlib.contextmanager
def bounded_by(seconds: float) -> Iterator[None]:
    """CALL_BOUND `seconds` inside: for a request whose PostgreSQL work may rightly take longer (an erasure)."""
    token = CALL_BOUND.set(seconds)
    try:
        yield
    finally:
        CALL_BOUND.reset(token)


@contextlib.contextmanager
def stalls(bound: float | None, what: str = "PostgreSQL did not answer") -> Iterator[None]:
    """A wait for PostgreSQL given up at `bound` (asyncpg's TimeoutError) raised as PostgresStalled, saying `what`;
    None: a TimeoutError of the caller's own, raised as it is."""
    try:
        yield
    except TimeoutError as exc:
        if bound is None:  # the caller's own timeout, or the command timeout: as asyncpg raised it
            raise
        raise PostgresStalled(f"{what} within {bound:g}s") from exc


def _bound(timeout: float | None) -> float | None:
    """The context's bound when the caller gave no timeout of its own."""
    return CALL_BOUND.get() if timeout is None else None


class BoundedConnection(asyncpg.Connection):
    """The query methods take the context's bound as their timeout (transactions go through execute). They keep
    asyncpg's signatures, `timeout=` included (hence ASYNC109's noqa)."""

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:  # noqa: ASYNC109
        bound = _bound(timeout)
        with stalls(bound):
            return await super().execute(query, *args, timeout=bound or timeout)

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        bound = _bound(timeout)
        with stalls(bound):
            return await super().executemany(command, args, timeout=bound or timeout)

    async def fetch(self, query: str, *args: Any, timeout: float | None = None,  # noqa: ASYNC109
                    record_class: Any = None) -> list:
        bound = _bound(timeout)
        with stalls(bound):
            return await super().fetch(query, *args, timeout=bound or timeout, record_class=record_class)

    async def fetchrow(self, query: str, *args: Any, timeout: float | None = None,  # noqa: ASYNC109
                       record_class: Any = None) -> Any:
        bound = _bound(timeout)
        with stalls(bound):
            return await super().fetchrow(query, *args, timeout=bound or timeout, record_class=record_class)

    async def fetchval(self, query: str, *args: Any, column: int = 0, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        bound = _bound(timeout)
        with stalls(bound):
            return await super().fetchval(query, *args, column=column, timeout=bound or timeout)


class _Acquiring:
    """Pool.acquire()'s context, with a wait past the bound raised as PostgresStalled."""

    def __init__(self, inner: Any, bound: float | None) -> None:
        self._inner, self._bound = inner, bound

    async def __aenter__(self) -> asyncpg.Connection:
        # Every connection busy (stalled, or a pool too small for the load) or a new one not made.
        with stalls(self._bound, "no connection of the pool came free, or none could be opened,"):
            return await self._inner.__aenter__()

    def __await__(self) -> Any:  # `conn = await pool.acquire()`, asyncpg's other form
        return self.__aenter__().__await__()

    async def __aexit__(self, *exc_info: object) -> None:
        # Releasing waits for a cancelled query's end and resets the connection within the same bound (asyncpg);
        # one that cannot is closed.
        with stalls(self._bound):
            await self._inner.__aexit__(*exc_info)


class BoundedPool(asyncpg.Pool):
    """Its waits for a connection take the context's bound too."""

    def acquire(self, *, timeout: float | None = None) -> Any:
        bound = _bound(timeout)
        return _Acquiring(super().acquire(timeout=bound or timeout), bound)
