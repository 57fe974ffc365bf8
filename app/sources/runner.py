"""Runs data-source checks and syncs in the background and moves the status machine.

    (created) -> testing --check fails--> error
    testing --check passes--> syncing --sync ok--> active, or --sync fails--> error
    active/error --schedule or POST .../sync--> syncing --> active (last_synced_at set) or error
    any --pause--> paused --resume--> active (next sync per schedule), or syncing while a run paused between
    pages goes on (a run ends the source in active or error whatever it was resumed to), or testing when
    paused before its check and first sync passed (the check runs again)

A run holds a lease on the row (lease_until), renewed while it runs and with every committed page; a lease
left by a process that died expires and the scheduled job picks the source up again. Each page's events,
profile updates and cursor are committed in one transaction that first locks the source row, so a
source deleted mid-sync imports nothing more and a paused one stops at the next page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from functools import partial

import asyncpg
import msgspec
from aiohttp import web
from cryptography.exceptions import InvalidTag

from actors.workspace import month_start
from app.bodies import field_of
from app.crypto import CredentialBox
from app.scheduler import Scheduler
from app.sources import connector_class
from app.sources.base import Batch, SourceError, redact
from app.sources.netguard import REFUSED, DestinationRefused, NetGuard
from app.sources.schedule import next_sync
from app.sources.schemas import CREDENTIALS, Options, Secret
from common.metrics import Metrics
from storage import data_sources as store
from storage import events as event_store
from storage import users as user_store
from storage.events import EventRow
from storage.ids import new_id

log = logging.getLogger("tally.sources")

JOB = "data_source_syncs"
JOB_SECONDS = 60.0
LEASE_SECONDS = 900.0
# A live run renews its lease this often, so that only a dead process's lease expires: a page may take longer
# than the lease (a slow query, a slow peer), and another process would then claim the source and import the
# same rows again.
HEARTBEAT_SECONDS = LEASE_SECONDS / 4
# Runs at once in one process, and of them at most CONCURRENCY - 1 (at least one) of one workspace, so that
# another workspace's source always finds a slot: scheduled runs and those started by POST (create, sync now)
# alike, or one workspace could start any number of syncs at once.
CONCURRENCY = 4


class SourceGone(Exception):
    """The source was deleted while it synced."""


class SourcePaused(Exception):
    """The source was paused while it synced."""


class PageSink:
    def __init__(self, pool: asyncpg.Pool, row: asyncpg.Record) -> None:
        self.pool = pool
        self.source_id, self.workspace_id, self.env = row["id"], row["workspace_id"], row["env"]

    async def commit(self, batch: Batch) -> None:
        received = datetime.now(UTC)
        records = [
            EventRow(new_id("evt"), self.workspace_id, self.env, e.name, e.ts, received, user_id=e.user_id,
                     properties=e.properties)
            for e in batch.events
        ]
        async with self.pool.acquire() as conn:
            await event_store.ensure_partitions(conn, sorted({month_start(e.ts) for e in batch.events}))
            async with conn.transaction():
                status = await store.lock_for_commit(conn, self.source_id)
                if status is None:
                    raise SourceGone
                if status == "paused":
                    raise SourcePaused
                if records:
                    # The events trigger drops erased users' rows and keeps profiles (migration 0009).
                    await event_store.copy_events(conn, records)
                await user_store.merge_traits(conn, self.workspace_id, self.env, batch.traits)
                if batch.digests_imported:
                    await store.keep_import_digests(conn, self.source_id, batch.digests_imported)
                if batch.digests_skipped:
                    await store.match_import_rows(conn, self.source_id, batch.digests_skipped)
                if batch.import_done:
                    await store.drop_import_digests(conn, self.source_id)
                await store.advance(conn, self.source_id, batch.cursor, batch.size, LEASE_SECONDS)

    async def restart_import(self) -> None:
        async with self.pool.acquire() as conn:
            await store.restart_import(conn, self.source_id)

    async def kept_unread(self, digests: list[bytes]) -> dict[bytes, int]:
        async with self.pool.acquire() as conn:
            return await store.kept_unread(conn, self.source_id, digests)

    async def first_seen(self, name: str, prop: str, since: datetime) -> dict[str, datetime]:
        async with self.pool.acquire() as conn:
            return await event_store.first_seen(conn, self.workspace_id, self.env, name, prop, since)


class NoFreeSlot(Exception):
    """No run slot this workspace may take is free in this process: nothing was started."""


class SourceRunner:
    def __init__(self, pool: asyncpg.Pool, box: CredentialBox, timeout: float, guard: NetGuard,
                 metrics: Metrics) -> None:
        self.pool = pool
        self.metrics = metrics
        self.box = box
        self.timeout = timeout
        self.guard = guard
        self._tasks: dict[str, asyncio.Task] = {}
        self._slots: dict[str, int] = {}  # source id -> workspace id of every run in this process
        self._claims: set[asyncio.Task] = set()  # leases being taken
        self._filling = asyncio.Lock()  # one claimer at a time counts the free slots
        self._stopping = False

    def start(self) -> None:
        """Nothing runs until a source is started (start_new, start_sync, or the scheduled job's run_due)."""

    def _start(self, source_id: str, run: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(run, name=f"source:{source_id}")
        self._tasks[source_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(source_id, None))

    @property
    def running(self) -> list[str]:
        """Ids of sources with a background run in this process."""
        return list(self._tasks)

    async def stop(self) -> None:
        """Stop runs in progress and release their leases so that the next start resumes them at once."""
        self._stopping = True  # a run that ends now starts no other, and no claim begins
        # A claim under way ends first (its caller may be gone: the scheduler stopped); its run is stopped below.
        await asyncio.gather(*self._claims, return_exceptions=True)
        running = list(self._tasks)
        for task in list(self._tasks.values()):
            task.cancel()
        for task in list(self._tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if running:
            async with self.pool.acquire() as conn:
                await store.release_leases(conn, running)

    def _busy_workspaces(self) -> list[int]:
        """Workspaces holding their share of this process's slots: CONCURRENCY - 1 (at least one), so that
        another workspace's source always finds a slot."""
        share = max(1, CONCURRENCY - 1)
        return [w for w, n in Counter(self._slots.values()).items() if n >= share]

    def _refusal(self, workspace_id: int) -> str | None:
        """Why no run of this workspace can start in this process now; None when a slot is free."""
        if self._stopping:
            return "the server is stopping; try again once it is back"
        if len(self._slots) >= CONCURRENCY:
            return (f"all {CONCURRENCY} sync slots of this server are taken; try again once a sync ends "
                    "(the source also syncs on its schedule)")
        if workspace_id in self._busy_workspaces():
            return (f"this workspace already runs {max(1, CONCURRENCY - 1)} syncs on this server, its most at "
                    "once; try again once one ends (the source also syncs on its schedule)")
        return None

    async def start_new(self, workspace_id: int, source_id: str) -> bool:
        """The connection check and first sync of a source just created, in a slot, now. Without a free slot
        (False) the source waits, testing and unleased, for the scheduled job, which takes testing sources first."""
        async with self._filling:
            if self._refusal(workspace_id) is not None:
                return False
            row = await self._claim(lambda conn: store.claim_new(conn, source_id, LEASE_SECONDS), refill=False)
            return row is not None

    async def start_sync(self, workspace_id: int, env: str, source_id: str) -> asyncpg.Record | None:
        """POST .../sync: a sync of an active or errored source, in a slot, now; the source's row (syncing), or
        None when it cannot run now (paused, testing, running). NoFreeSlot, starting nothing, when no slot
        this workspace may take is free: a workspace could otherwise run any number of syncs at once."""
        async with self._filling:
            refusal = self._refusal(workspace_id)
            if refusal is not None:
                raise NoFreeSlot(refusal)
            if source_id in self._tasks:  # a page slower than its lease: the run goes on
                return None
            return await self._claim(
                lambda conn: store.claim_manual(conn, workspace_id, env, source_id, LEASE_SECONDS), refill=False)

    async def run_due(self) -> None:
        """The scheduled job: start the sources whose sync is due (or whose runner died) in the background,
        at most CONCURRENCY at once in this process, and return without waiting for them. A long import
        holds its own slot, not the job, so the other sources keep their schedule; a run the job started
        starts the next due source at once when it ends."""
        await self._fill()

    async def _fill(self) -> None:
        async with self._filling:
            while not self._stopping and len(self._slots) < CONCURRENCY:
                claim = partial(store.claim_next_due, lease_seconds=LEASE_SECONDS, running=list(self._tasks),
                                busy_workspaces=self._busy_workspaces())
                row = await self._claim(claim, refill=True)
                if row is None:
                    return

    async def _claim(self, claim: Callable[[asyncpg.Connection], Awaitable[asyncpg.Record | None]], *,
                     refill: bool) -> asyncpg.Record | None:
        """Take a lease with `claim` and run the source it returns in a slot. The claim goes on to its end when
        the caller is cancelled (the scheduler stopping, a request cut off): a lease taken whose answer was
        dropped held the source for LEASE_SECONDS past a restart. Its run starts, and stop() ends it and gives
        the lease back. A run the job started gives its slot to the next due source when it ends (`refill`);
        one started by a request leaves that to the job's next round."""

        async def claimed() -> asyncpg.Record | None:
            async with self.pool.acquire() as conn:
                row = await claim(conn)
            if row is not None:
                self._slots[row["id"]] = row["workspace_id"]
                self._start(row["id"], self._run_in_slot(row, refill))
            return row

        task = asyncio.create_task(claimed(), name="source-claim")
        self._claims.add(task)
        task.add_done_callback(self._claims.discard)
        return await asyncio.shield(task)

    async def _run_in_slot(self, row: asyncpg.Record, refill: bool) -> None:
        try:
            await self._run(row)
        finally:
            self._slots.pop(row["id"], None)
        if refill and not self._stopping:
            # The freed slot goes to the next due source, in a claim of its own: this source's run is over
            # (its status says so), and a sync of it asked for meanwhile must not find it still in progress.
            task = asyncio.create_task(self._fill(), name="source-refill")
            self._claims.add(task)  # stop() waits for it as for any claim
            task.add_done_callback(self._claims.discard)

    async def _run(self, row: asyncpg.Record) -> None:
        beat = asyncio.create_task(self._keep_lease(row["id"]), name=f"source-lease:{row['id']}")
        try:
            await self._run_leased(row)
        finally:
            beat.cancel()

    async def _keep_lease(self, source_id: str) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                async with self.pool.acquire() as conn:
                    await store.renew_lease(conn, source_id, LEASE_SECONDS)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # The next beat tries again; the lease lasts several beats.
                log.warning("data source lease renewal failed source=%s error=%s", source_id, type(exc).__name__)

    async def _run_leased(self, row: asyncpg.Record) -> None:
        source_id, kind = row["id"], row["type"]
        try:
            plain = self.box.open(row["credentials"], source_id)
        except (InvalidTag, ValueError):  # the secret changed since the source was created
            await self._finish(row, ok=False, reason="the stored credentials cannot be decrypted with the "
                               "current TALLY_SECRET; delete and reconnect the source")
            return
        try:
            credentials: Secret = msgspec.json.decode(plain, type=CREDENTIALS[kind])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Decrypted but not this type's credentials: a bug or a hand-edited row, not a secret change.
            log.error("data source credentials do not decode source=%s type=%s error=%s", source_id, kind, exc)
            await self._finish(row, ok=False, reason=f"the stored credentials are not valid {kind} credentials; "
                               "delete and reconnect the source")
            return
        try:
            options = msgspec.convert(row["options"], Options)
        except msgspec.ValidationError as exc:
            # Stored by a release whose check was looser (a table name with a final line break): the run
            # would fail before it started, and leave the source syncing until its lease ran out, again and again.
            field, message = field_of(exc)
            await self._finish(row, ok=False, reason=f"the stored options are not valid (options{'.' if field else ''}"
                               f"{field}: {message.strip()}); delete and reconnect the source")
            return
        connector_of = await connector_class(kind)
        connector = connector_of(credentials, options, PageSink(self.pool, row), timeout=self.timeout, guard=self.guard)
        ok, reason, rows = False, None, 0
        try:
            if row["status"] == "testing":
                async with asyncio.timeout(self.timeout * 2):  # belt and braces over the connector's own
                    await connector.check()
                async with self.pool.acquire() as conn:
                    await store.set_syncing(conn, source_id)
            rows, _ = await connector.sync(row["sync_cursor"])
            ok = True
        except SourceGone:
            return
        except SourcePaused:
            async with self.pool.acquire() as conn:
                await store.stopped_by_pause(conn, source_id)
            return
        except DestinationRefused:
            reason = REFUSED  # one fixed text, whatever was asked for
        except SourceError as exc:
            reason = redact(str(exc), credentials.values())
        except TimeoutError:
            reason = f"the {kind} source did not answer within {self.timeout * 2:g}s"
        except Exception as exc:
            reason = f"unexpected {type(exc).__name__} while syncing"
            text = redact("".join(traceback.format_exception(exc)), credentials.values())
            log.error("data source run failed source=%s type=%s\n%s", source_id, kind, text)
        self.metrics.source_runs.labels(kind, "ok" if ok else "error").inc()
        self.metrics.source_rows.labels(kind).inc(rows)
        if not ok:
            log.warning("data source sync failed source=%s type=%s reason=%s", source_id, kind, reason)
        await self._finish(row, ok=ok, reason=reason)

    async def _finish(self, row: asyncpg.Record, *, ok: bool, reason: str | None) -> None:
        next_at = next_sync(row["frequency"], row["sync_time"], datetime.now(UTC))
        async with self.pool.acquire() as conn:
            await store.finish(conn, row["id"], ok=ok, reason=reason, next_sync_at=next_at)


RUNNER: web.AppKey[SourceRunner] = web.AppKey("source_runner", SourceRunner)


def register(app: web.Application, scheduler: Scheduler) -> None:
    """JOB_REGISTRARS entry: the due-sync job of the runner app/server.py created."""
    scheduler.every(JOB, JOB_SECONDS, app[RUNNER].run_due)
