"""The actor: a bounded mailbox drained by one asyncio task that flushes batches durably.

Group commit: every submitter awaits the future of its message, which resolves only after the
batch holding it is committed. A failed flush fails exactly the messages of that batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field

import asyncpg
from redis.exceptions import RedisError

from common.metrics import Metrics
from common.outages import POSTGRES, POSTGRES_UNREACHABLE, RETRY_AFTER_SECONDS, Outages

log = logging.getLogger("tally.actors")


class Overloaded(Exception):
    """The mailbox is full (or the actor is shutting down): answer 503 with Retry-After."""

    retry_after = 1


class StoreFailed(Exception):
    """The batch holding this message could not be committed."""


class StoreUnreachable(StoreFailed):
    """PostgreSQL could not be reached, so the batch was not committed: answer 503 with Retry-After."""

    retry_after = RETRY_AFTER_SECONDS


class StoreStalled(StoreUnreachable):
    """PostgreSQL did not commit the message within the actor's commit bound (a lock held on its table, a server
    process stopped): its statement is cancelled, or it was never sent; 503 with Retry-After as for an outage."""


# Errors that mean "a store (PostgreSQL, or Redis for site sessions) refused or was unreachable": the
# actor survives them.
STORE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError, RedisError)


@dataclass(slots=True)
class Message:
    kind: str
    items: list
    future: asyncio.Future
    enqueued: float = 0.0
    # The request's Idempotency-Key (a storage.idempotency.Claim), for the workspace actor; None for most.
    claim: object = None
    size: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = len(self.items)


# A flush's follow-up once its batch is committed and answered (Actor.flush).
AfterCommit = Callable[[], Awaitable[None]]

# How long a message may wait for its commit (queued, then flushed) before it is answered 503
# (TALLY_COMMIT_TIMEOUT_SECONDS).
COMMIT_TIMEOUT_SECONDS = 10.0
# How long a flush cancelled at that bound may wait for PostgreSQL to confirm the cancellation before its
# submitters are answered 503 regardless.
CANCEL_GRACE_SECONDS = 2.0
# How long a failed flush's connection may take to answer the probe that tells a broken one from a live one.
PROBE_SECONDS = 2.0
# A batch split off a wave holds at least this many requests: tiny flushes cost more than they overlap.
MIN_SPLIT_REQUESTS = 16


class Actor:
    kind = "actor"
    # Clients that wait for each answer before sending again (an SDK with a fixed set of connections)
    # turn one batch of everything waiting into a convoy: all answered at once, all back at once, and
    # the process idles through every flush. Splitting the waiting requests over one batch more than
    # there are flush slots keeps one batch back, so the loop has requests to parse while the others
    # commit. Requests, not events, are split: a few large batch requests still go out as one COPY.
    split_batches = False

    def __init__(self, key: Hashable, *, max_batch: int, capacity: int, linger: float,
                 max_inflight: int = 1, metrics: Metrics | None = None, outages: Outages | None = None,
                 commit_timeout: float = COMMIT_TIMEOUT_SECONDS) -> None:
        self.key = key
        self.max_batch = max_batch
        self.capacity = capacity
        self.linger = linger
        # Flushes allowed in flight at once: while one batch waits for PostgreSQL, the next can be
        # encoded and sent.
        self.max_inflight = max_inflight
        # A message not committed this long after it was queued is answered 503 (StoreStalled): a PostgreSQL that
        # neither fails nor answers would otherwise hold every request until asyncpg's command timeout.
        self.commit_timeout = commit_timeout
        self._mail: deque[Message] = deque()
        self.pending = 0
        self._wakeup = asyncio.Event()
        self._inflight: set[asyncio.Task] = set()
        self._crash: BaseException | None = None
        self._task: asyncio.Task | None = None
        self.closing = False
        self.last_active = asyncio.get_running_loop().time()
        # Labelled children resolved once: labels() takes a lock and a dict lookup on every call.
        metrics = metrics or Metrics()  # an actor made outside an app (tests) counts on its own
        self.outages = outages or Outages(metrics)
        self._depth = metrics.mailbox_depth.labels(self.kind)
        self._ingest_seconds = metrics.ingest_seconds.labels(self.kind)
        self._flush_seconds = metrics.flush_seconds.labels(self.kind)
        self._batch_events = metrics.batch_events.labels(self.kind)
        self._ingested = metrics.events_ingested.labels(self.kind)

    # -- called by request handlers ------------------------------------------------------------
    def submit(self, kind: str, items: list, claim: object = None) -> asyncio.Future:
        """Queue the items; the future resolves once they are committed: to None, or to what the actor's
        flush answers instead (the workspace actor: the earlier claim of an Idempotency-Key already used)."""
        if self.closing:
            raise Overloaded("shutting down")
        if self.pending and self.pending + len(items) > self.capacity:
            raise Overloaded("mailbox full")
        loop = asyncio.get_running_loop()
        msg = Message(kind, items, loop.create_future(), loop.time(), claim)
        self._mail.append(msg)
        self.pending += msg.size
        self._depth.inc(msg.size)
        self._wakeup.set()
        return msg.future

    # -- to be provided by concrete actors -------------------------------------------------------
    async def flush(self, batch: list[Message]) -> AfterCommit | None:
        """Commit the batch durably (one transaction). What is to be done once it is durable and cannot change
        its answer (the realtime window's update) is returned, to be run after the submitters are answered:
        outside the commit's bound, so a stall there cannot answer a stored batch 503. It must not raise."""
        raise NotImplementedError

    # -- database connections of a busy streak -----------------------------------------------------
    pool: asyncpg.Pool | None = None  # set by concrete actors that write: the writers' pool (storage.db)
    _held: list[asyncpg.Connection] | None = None

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection kept across back-to-back flushes. Connections go back to the pool when the actor runs
        dry, after a failure, and whenever the pool has no idle connection left, so a busy actor never
        starves other actors."""
        if self._held is None:
            self._held = []
        conn = self._held.pop() if self._held else await self.pool.acquire()
        try:
            yield conn
        except Exception as exc:
            if isinstance(exc, (*POSTGRES_UNREACHABLE, asyncpg.PostgresError)) or not await _broken(conn):
                await self._release(conn)
                raise
            # The connection broke under the flush and asyncpg said so as a client error: a server that went
            # away sent its FATAL (57P01) before closing, and the next operation met the protocol still
            # consuming it ("cannot switch to state 21; another operation (2) is in progress"). An outage,
            # answered 503, not a crash; the connection is never reused (asyncpg gives its holder back itself).
            with contextlib.suppress(Exception):
                conn.terminate()
            await self._release(conn)
            raise asyncpg.ConnectionDoesNotExistError(
                f"the connection to PostgreSQL broke during the flush ({type(exc).__name__})") from exc
        except BaseException:
            await self._release(conn)
            raise
        if self.pool.get_idle_size() == 0:
            await self._release(conn)
        else:
            self._held.append(conn)

    async def _release(self, conn: asyncpg.Connection) -> None:
        """Give a connection back. A connection whose socket closed was already let go by asyncpg, and
        releasing it again raises ("release() called on a free connection holder"): that error must neither
        replace the flush's own nor fail a batch that committed (asyncpg terminates a connection it cannot
        reset), so it is only logged."""
        try:
            await self.pool.release(conn)
        except Exception as exc:
            log.debug("releasing a writer connection failed actor=%s error=%r", self.kind, exc)

    async def _return_connections(self) -> None:
        while self._held:
            await self._release(self._held.pop())

    # -- the task ----------------------------------------------------------------------------------
    def idle(self) -> bool:
        return not self._mail and not self._inflight

    def start(self) -> asyncio.Task:
        """Serve the mailbox in a task of its own (again after a crash: same actor, same mailbox)."""
        self._task = asyncio.create_task(self.run(), name=f"actor:{self.kind}:{self.key}")
        return self._task

    async def stop(self) -> None:
        """Refuse new messages and return once the mailbox is drained and flushed. A task the supervisor
        restarts meanwhile (after a crash) is waited for too."""
        self.closing = True
        self._wakeup.set()
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._crash = None
        try:
            await self._serve(loop)
        finally:
            # A crash leaves sibling flushes running: let them settle before the restart or the exit.
            while self._inflight:
                await asyncio.wait(set(self._inflight))
            await self._return_connections()

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            if self._crash is not None:
                raise self._crash
            if self._mail and loop.time() >= self._mail[0].enqueued + self.commit_timeout:
                self._expire(loop.time())
                continue
            if not self._mail or len(self._inflight) >= self.max_inflight:
                if not self._mail and not self._inflight:
                    if self._held:
                        await self._return_connections()
                        continue  # that awaited: mail may have come in, and its wake-up must not be cleared
                    if self.closing:
                        return
                self._wakeup.clear()
                if self._mail:  # every slot busy: wake at the oldest message's deadline at the latest
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout_at(self._mail[0].enqueued + self.commit_timeout):
                            await self._wakeup.wait()
                else:
                    await self._wakeup.wait()
                continue
            if self.linger and self.pending < self.max_batch and not self.closing:
                await asyncio.sleep(self.linger)
            task = loop.create_task(self._flush_batch(self._take(), loop))
            self._inflight.add(task)
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task) -> None:
        self._inflight.discard(task)
        self.last_active = task.get_loop().time()
        if not task.cancelled() and task.exception() is not None and self._crash is None:
            self._crash = task.exception()
        self._wakeup.set()

    def _expire(self, now: float) -> None:
        """Answer 503 the queued messages whose commit bound has passed while every flush slot was held (by
        flushes stalled past their own bound and still cleaning up): never sent, so nothing of theirs is stored.
        The mailbox is in arrival order, so they are at its front."""
        expired: list[Message] = []
        while self._mail and now >= self._mail[0].enqueued + self.commit_timeout:
            expired.append(self._mail.popleft())
        taken = sum(msg.size for msg in expired)
        self.pending -= taken
        self._depth.dec(taken)
        self._refuse(expired, StoreStalled(f"no flush slot came free within {self.commit_timeout:g}s"), None)

    def _refuse(self, batch: list[Message], failure: StoreUnreachable, cause: BaseException | None) -> None:
        """Answer the messages 503 for an outage (`cause`, else the failure itself, is what the outage line says;
        readiness hears of it too)."""
        self.outages.down(POSTGRES, cause or failure, "ingestion answers 503")  # one line per outage
        self.outages.ingestion_failed(cause or failure)
        _fail(batch, failure)

    def _take(self) -> list[Message]:
        requests = len(self._mail)
        if self.split_batches:
            requests = max(MIN_SPLIT_REQUESTS, requests // (self.max_inflight + 1))
        batch: list[Message] = []
        taken = 0
        while self._mail and (not batch or (len(batch) < requests
                                            and taken + self._mail[0].size <= self.max_batch)):
            msg = self._mail.popleft()
            batch.append(msg)
            taken += msg.size
        self.pending -= taken
        self._depth.dec(taken)
        return batch

    async def _flush_batch(self, batch: list[Message], loop: asyncio.AbstractEventLoop) -> None:
        started = loop.time()
        # The batch's commit bound is its oldest message's (the first taken). Then the flush is cancelled: asyncpg
        # asks PostgreSQL to cancel the running statement, and the transaction rolls back; the submitters are
        # answered 503 once that is confirmed, so what they were refused is not stored. A PostgreSQL that does not
        # confirm within CANCEL_GRACE_SECONDS (a server stopped) gets them answered anyway: a statement that
        # PostgreSQL then finishes after all, or a COMMIT already sent, may still store what was refused, as
        # behind any lost answer (decisions.md). The cancelled flush holds its slot until its connection is
        # cleaned up; the mailbox's own bound (_expire) answers what waits meanwhile.
        deadline = batch[0].enqueued + self.commit_timeout
        answer = loop.call_at(deadline + CANCEL_GRACE_SECONDS, self._refuse, batch,
                              StoreStalled(f"no commit within {self.commit_timeout:g}s"), None)
        try:
            async with asyncio.timeout_at(deadline):
                after = await self.flush(batch)
        except STORE_ERRORS as exc:
            # A timeout (the bound above, or asyncpg's command timeout) is a stalled PostgreSQL: an outage too.
            if isinstance(exc, (*POSTGRES_UNREACHABLE, TimeoutError)):
                if isinstance(exc, TimeoutError) and loop.time() >= deadline:
                    self._refuse(batch, StoreStalled(f"no commit within {self.commit_timeout:g}s"), None)
                else:
                    self._refuse(batch, StoreUnreachable(str(exc) or type(exc).__name__), exc)
                return
            log.error("flush failed actor=%s key=%s events=%d error=%s", self.kind, self.key,
                      sum(m.size for m in batch), type(exc).__name__)
            _fail(batch, StoreFailed(str(exc)))
            return
        except BaseException:
            # A crash: nothing of this batch was committed (the transaction rolled back), so its
            # submitters learn it failed; the supervisor restarts the task on the same mailbox.
            _fail(batch, StoreFailed("actor crashed"))
            raise
        finally:
            answer.cancel()
        now = loop.time()
        events = 0
        for msg in batch:
            events += msg.size
            if not msg.future.done():
                msg.future.set_result(None)
            self._ingest_seconds.observe(now - msg.enqueued)
        self._flush_seconds.observe(now - started)
        self._batch_events.observe(events)
        self._ingested.inc(events)
        self.outages.up(POSTGRES)
        self.outages.ingestion_committed()
        if after is not None:
            await after()


async def _broken(conn: asyncpg.Connection) -> bool:
    """Whether a writer connection that failed its flush can no longer run a statement (asked before it is
    released: a released connection answers nothing): closed, let go by asyncpg, or stuck in a protocol state
    no statement passes. A live connection answers at once: the flush's error is then its own."""
    try:
        if conn.is_closed():
            return True
        async with asyncio.timeout(PROBE_SECONDS):
            await conn.execute("SELECT 1")
    except Exception:  # "connection has been released back to the pool", "another operation (2)", a timeout
        return True
    return False


def _fail(batch: list[Message], exc: Exception) -> None:
    for msg in batch:
        if not msg.future.done():
            msg.future.set_exception(exc)
            # Retrieve it here too, so a submitter that already went away leaves no warning.
            msg.future.exception()
