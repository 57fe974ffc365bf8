"""One policy for dependencies going away (PostgreSQL, Redis, a ClickHouse server).

Callers report what they see: `down(dependency, exc)` when a call failed because the dependency is
unreachable, `up(dependency)` when a call succeeded. The first failure of an outage writes one log line
and counts one outage in /metrics; later failures of the same outage are silent, so an outage under
load does not write a traceback per request. An outage ends at the next success, or when no failure
was seen for QUIET_SECONDS (callers that have no success to report, e.g. a request answered 503). Outages that
follow within HOLD_DOWN_SECONDS of one's end (flapping) are summed up in one line per window.

What a failure means to the caller is decided where it happens: the HTTP edge answers 503 with
Retry-After (app/outages.py), while site sessions, rate limits and the daily salt fall back to process
memory and count each fallback (tally_dependency_fallbacks_total); while Redis is down they take the fallback
at once and ask it again once a second (`worth_trying`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import asyncpg
from clickhouse_connect.driver.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from common.metrics import Metrics

T = TypeVar("T")

log = logging.getLogger("tally.outages")

POSTGRES, REDIS, ANALYTICS = "postgres", "redis", "analytics"
QUIET_SECONDS = 30.0
HOLD_DOWN_SECONDS = 60.0  # after an outage's return, further outages within this are summed up in one line
RETRY_AFTER_SECONDS = 5  # what a 503 for an unreachable dependency asks clients to wait
REDIS_FALLBACK = "sessions, rate limits and salts fall back to process memory"
# While a dependency with a fallback is down, how often one caller asks it again (worth_trying).
PROBE_SECONDS = 1.0
# The longest a Redis call waits (ask_redis; the rate limiter's turn): a stalled Redis held each for the client's
# socket timeout (5 s), a flush past its commit bound.
FALLBACK_WAIT_SECONDS = 1.0

# Errors that mean "Redis cannot be reached", not "Redis refused this command".
REDIS_UNREACHABLE: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
# Errors that mean "PostgreSQL cannot be reached" (a connection refused, reset or dropped mid-query, or
# ended by a server going away: a shutdown, or a postmaster that died, ends each backend with 57P01/57P02),
# or that it cannot take this work now for want of a resource: its disk full (53100), out of memory (53200),
# no connection slot left (53300). Those say nothing about the request, and the same request succeeds once
# the resource is back, so they are an outage (503, Retry-After) too, not a refusal (decisions.md).
POSTGRES_UNREACHABLE: tuple[type[BaseException], ...] = (
    asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError, asyncpg.ConnectionFailureError,
    asyncpg.InterfaceError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError, ConnectionError,
    asyncpg.DiskFullError, asyncpg.OutOfMemoryError, asyncpg.TooManyConnectionsError,
)


# Errors that mean "the ClickHouse server (TALLY_ANALYTICS_URL) cannot be reached": clickhouse-connect's HTTP
# client raises OperationalError for a refused, reset or timed-out connection and for a response cut short,
# never for a query the server refused (a DatabaseError). The embedded engine (chDB) never raises it.
ANALYTICS_UNREACHABLE: tuple[type[BaseException], ...] = (OperationalError,)


class DependencyDown(Exception):
    """A call not made because its dependency is down and another caller asks it this second (worth_trying): the
    request answers 503 as for the failure itself, without counting another one (which would put off the probe)."""

    def __init__(self, dependency: str) -> None:
        super().__init__(f"{dependency} is down; asked again within {PROBE_SECONDS:g}s")
        self.dependency = dependency


class Outages:
    """The book of outages. A dependency flapping (down and back again and again: a full disk where small batches
    still fit, a Redis restart's pooled connections failing one by one) logs its first outage and return as any
    does, then is held down: outages starting within HOLD_DOWN_SECONDS of that return are counted (in /metrics too)
    but not logged, and one line at the window's end sums them up, so logs stay bounded however fast it flips. A
    window with outages is followed by another; a quiet one ends the hold-down."""

    def __init__(self, metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics or Metrics()
        self._clock = clock
        self._last_failure: dict[str, float] = {}  # dependency -> clock time of its latest failure
        # (clock time, error class) of ingestion's latest flush when it failed as an outage; None once one commits.
        self._ingestion_failure: tuple[float, str] | None = None
        self._hold_until: dict[str, float] = {}  # dependency -> end of its hold-down window
        self._flaps: dict[str, int] = {}  # dependency -> outages started in its window, not logged
        self._latest: dict[str, tuple[BaseException, str]] = {}  # dependency -> (error, consequence), while held
        self._probed: dict[str, float] = {}  # dependency -> clock time a caller last asked it while it was down

    def is_down(self, dependency: str) -> bool:
        seen = self._last_failure.get(dependency)
        return seen is not None and self._clock() - seen <= QUIET_SECONDS

    def worth_trying(self, dependency: str) -> bool:
        """Whether a caller that has a fallback should ask the dependency now: always while it is up; while it is
        down, one caller per PROBE_SECONDS (after its latest failure or probe), the others taking their fallback
        at once. A stalled Redis held every rate-limit check for the client's timeout, request after request."""
        if not self.is_down(dependency):
            return True
        now = self._clock()
        if now - max(self._last_failure[dependency], self._probed.get(dependency, 0.0)) < PROBE_SECONDS:
            return False
        self._probed[dependency] = now
        return True

    def down(self, dependency: str, exc: BaseException, consequence: str) -> None:
        """Record a failure; logs and counts only the first of an outage (and, held down, counts it only)."""
        if self._hold_until:
            self._roll(dependency)
        if not self.is_down(dependency):
            self.metrics.dependency_outages.labels(dependency).inc()
            if dependency in self._hold_until:
                self._flaps[dependency] += 1
            else:
                log.error("%s unreachable (%s: %s); %s until it answers again", dependency, type(exc).__name__,
                          exc, consequence)
        if dependency in self._hold_until:
            self._latest[dependency] = (exc, consequence)
        self._last_failure[dependency] = self._clock()

    def ingestion_failed(self, exc: BaseException) -> None:
        """An actor's flush failed as an outage (PostgreSQL unreachable, short of disk, memory or connections, or
        stalled past the commit bound): its events were answered 503."""
        self._ingestion_failure = (self._clock(), type(exc).__name__)

    def ingestion_committed(self) -> None:
        self._ingestion_failure = None

    def ingestion_outage(self) -> str | None:
        """The error class of an outage ingestion is in, for readiness: its latest flush failed as one and none
        committed since. PostgreSQL may answer every other query meanwhile (its disk full: 53100). Forgotten after
        QUIET_SECONDS without a failure, as an outage is: a process taken out of rotation for it gets no events
        to find out with, and would stay out for good."""
        failure = self._ingestion_failure
        if failure is None or self._clock() - failure[0] > QUIET_SECONDS:
            return None
        return failure[1]

    def up(self, dependency: str) -> None:
        seen = self._last_failure.pop(dependency, None)
        self._probed.pop(dependency, None)
        if self._hold_until:
            self._roll(dependency)
        if seen is None or dependency in self._hold_until:  # no outage, or a flap's end: summed up later
            return
        log.warning("%s reachable again", dependency)
        self._hold(dependency)

    def tick(self) -> None:
        """End the hold-down windows that are over, each with its line (a timer calls it at a window's end)."""
        for dependency in list(self._hold_until):
            self._roll(dependency)

    def _hold(self, dependency: str) -> None:
        self._hold_until[dependency] = self._clock() + HOLD_DOWN_SECONDS
        self._flaps[dependency] = 0
        with contextlib.suppress(RuntimeError):  # no running loop (a command, a test): the next call rolls it
            asyncio.get_running_loop().call_later(HOLD_DOWN_SECONDS, self.tick)

    def _roll(self, dependency: str) -> None:
        until = self._hold_until.get(dependency)
        if until is None or self._clock() < until:
            return
        del self._hold_until[dependency]
        flaps = self._flaps.pop(dependency, 0)
        latest = self._latest.pop(dependency, None)
        if not flaps:
            return  # a quiet window: the hold-down ends
        said = "%s flapping: %d more outages in the last %gs, not logged one by one; "
        if self.is_down(dependency) and latest is not None:
            # Down now: its return is logged, and starts a window of its own.
            exc, consequence = latest
            log.error(said + "unreachable now (%s: %s); %s until it answers again", dependency, flaps,
                      HOLD_DOWN_SECONDS, type(exc).__name__, exc, consequence)
        else:
            log.warning(said + "reachable now", dependency, flaps, HOLD_DOWN_SECONDS)
            self._hold(dependency)  # still held down: flapping on is summed up at the next window's end

    def log_filter(self, message: str, consequence: str, applies: Callable[[], bool] = lambda: True) -> logging.Filter:
        """A filter for a library's logger: its records that start with `message`, carry an error meaning
        PostgreSQL is unreachable and for which `applies()` (called while the record is logged: which pool
        is this?) are reported here (one line per outage) instead of logged with their traceback. For
        asyncpg's pool, which logs every failed attempt to restore its connection floor."""
        outages = self

        class _Unreachable(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                exc = record.exc_info[1] if record.exc_info else None
                if exc is None or not isinstance(exc, POSTGRES_UNREACHABLE) or not str(record.msg).startswith(message):
                    return True
                if not applies():
                    return True
                outages.down(POSTGRES, exc, consequence)
                return False

        return _Unreachable()

    def fallback(self, use: str, exc: BaseException | None) -> None:
        """`use` (sessions, rate_limits, salt) was served from process memory: Redis failed (`exc`), or was not
        asked, being down (None: worth_trying said no)."""
        if exc is not None:
            self.down(REDIS, exc, REDIS_FALLBACK)
        self.metrics.dependency_fallbacks.labels(use).inc()


async def ask_redis(outages: Outages, call: Coroutine[Any, Any, T]) -> T:
    """Run a Redis call: it waits at most FALLBACK_WAIT_SECONDS (a stalled Redis held each for the client's 5 s
    socket timeout), and while Redis is down only one call per PROBE_SECONDS asks it, the others raising
    DependencyDown at once. A timeout is raised as Redis's own. A caller with a fallback (a flush's visits, the
    realtime update) takes it on either; one without (a dashboard session, the realtime view) lets the HTTP edge
    answer 503, recording the outage for a failure."""
    if not outages.worth_trying(REDIS):
        call.close()
        raise DependencyDown(REDIS)
    try:
        async with asyncio.timeout(FALLBACK_WAIT_SECONDS):
            result = await call
    except TimeoutError:
        raise RedisTimeoutError(f"no answer within {FALLBACK_WAIT_SECONDS:g}s") from None
    outages.up(REDIS)
    return result
