"""The actor of one workspace and key environment: keyed /v1 events and identify calls, and Segment calls."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from actors.base import Actor, Message, StoreFailed
from storage import events as event_store
from storage import idempotency as idempotency_store
from storage import segment as segment_store
from storage import users as user_store
from storage.events import EventRow

# Items are storage.events.EventRows; a message with a claim (an Idempotency-Key) stores them only if its key is
# new, else it resolves to the key's earlier claim.
EVENTS = "events"
# Tally's identify: items are (user id, traits to merge, time, anonymous id to merge into the user or None,
# receive time).
IDENTIFY = "identify"
# Segment calls (app.segment.messages): items are (source_id, message_id or None, op, data).
SEGMENT = "segment"
OP_EVENT = "event"  # data: a storage.events.EventRow
OP_TRAITS = "traits"  # data: (profile id, traits to merge, time, receive time)
OP_ALIAS = "alias"  # data: (previous id, new id, receive time)


def month_start(ts: datetime) -> datetime:
    ts = ts.astimezone(UTC)
    return datetime(ts.year, ts.month, 1, tzinfo=UTC)


class PartitionCache:
    """Months known to have an events partition in this process (shared by all actors)."""

    def __init__(self) -> None:
        self.known: set[datetime] = set()

    async def ensure(self, pool: asyncpg.Pool, stamps: set[datetime]) -> None:
        if not stamps:
            return
        # A batch's stamps nearly always share a month: when its earliest and latest do, every stamp does,
        # which takes two conversions instead of one per event on every flush.
        first, last = month_start(min(stamps)), month_start(max(stamps))
        months = {first} if first == last else {month_start(ts) for ts in stamps}
        missing = months - self.known
        if missing:
            async with pool.acquire() as conn:
                await event_store.ensure_partitions(conn, sorted(missing))
            self.known |= missing


class WorkspaceActor(Actor):
    kind = "workspace"
    split_batches = True  # keyed clients are mostly server SDKs waiting on each answer (see Actor)

    def __init__(self, key: tuple[str, int, str], pool: asyncpg.Pool, partitions: PartitionCache,
                 **tuning) -> None:
        super().__init__(key, **tuning)
        _, self.workspace_id, self.env = key
        self.pool = pool
        self.partitions = partitions

    async def flush(self, batch: list[Message]) -> None:
        records: list[EventRow] = []
        traits: list[tuple[str, dict, datetime, datetime]] = []  # (user id, traits, time, received), in call order
        segment: list[tuple] = []
        # (previous id, target id, received) of Segment aliases, then of identify calls' anonymous-id merges
        merges: list[tuple[str, str, datetime]] = []
        claimed: list[Message] = []  # event messages with an Idempotency-Key: stored once their key is claimed
        for msg in batch:
            if msg.kind == EVENTS:
                if msg.claim is None:
                    records.extend(msg.items)
                else:
                    claimed.append(msg)
            elif msg.kind == IDENTIFY:
                traits.extend((user_id, new, at, received) for user_id, new, at, _, received in msg.items)
                merges.extend((anon, user_id, received) for user_id, _, _, anon, received in msg.items
                              if anon and anon != user_id)
            else:
                segment.extend(msg.items)
        stamps = {r.ts for r in records}
        if claimed:
            stamps.update(r.ts for msg in claimed for r in msg.items)
        stamps.update(item[3].ts for item in segment if item[2] == OP_EVENT)
        await self.partitions.ensure(self.pool, stamps)
        async with self.connection() as conn:
            if not traits and not segment and not merges and not claimed:
                # One statement: the events trigger checks erasures and keeps profiles (migration 0009).
                await event_store.copy_events(conn, records)
                return
            if not traits and not records and not claimed and all(item[2] == OP_EVENT for item in segment):
                # Segment tracks, pages and screens alone: one statement too (storage.segment.STORE_EVENTS).
                await segment_store.store_events(
                    conn, self.workspace_id, self.env,
                    [(s, m, row) for s, m, _, row in _first_of_each(segment)], datetime.now(UTC))
                return
            retries: list[tuple[Message, idempotency_store.Claim | None]] = []
            async with conn.transaction():
                # Keys first, in every transaction that claims any: a retry waits on its key before it locks
                # anything else, so it holds nothing the first request's flush could wait for.
                if claimed:
                    retries = await self._claim(conn, claimed, records)
                merges[:0] = await self._segment_ops(conn, segment, records, traits) if segment else []
                if segment:
                    # The sources' rows before any profile's, as in STORE_EVENTS (whose profile upkeep runs in
                    # the events trigger, after its touch): the other order deadlocked a flush of analytics.js's
                    # identify against one of its track for the same user on a source's first calls.
                    await segment_store.touch_sources(conn, [item[0] for item in segment], datetime.now(UTC))
                if records:
                    await event_store.copy_events(conn, records)
                if traits or merges:
                    # Identify calls and aliases received before an erasure of their user (an alias's target)
                    # are dropped, as the events trigger drops events: else one waiting in a batch recreates
                    # the erased profile, with its traits or with the events it moves.
                    erased = await user_store.erasures_of(
                        conn, self.workspace_id, self.env, [t[0] for t in traits] + [m[1] for m in merges])
                    traits = [t for t in traits if not _covered(erased, t[0], t[3])]
                    merges = [m for m in merges if not _covered(erased, m[1], m[2])]
                await user_store.merge_traits(conn, self.workspace_id, self.env, _merged(traits))
                for previous, target, _ in merges:
                    await segment_store.alias(conn, self.workspace_id, self.env, previous, target)
        # Committed: a retry is answered with its key's first answer. A key still unread after the claim's
        # rounds (pruned again and again between claim and read) stored nothing and says so; the client's
        # next retry claims it afresh.
        for msg, earlier in retries:
            if msg.future.done():  # its request went away
                continue
            if earlier is None:
                msg.future.set_exception(StoreFailed("the Idempotency-Key was taken and could not be read"))
                msg.future.exception()
            else:
                msg.future.set_result(earlier)

    async def _claim(self, conn: asyncpg.Connection, claimed: list[Message],
                     records: list[EventRow]) -> list[tuple[Message, idempotency_store.Claim | None]]:
        """Claim the Idempotency-Keys in this transaction: the events of a request whose key is new join
        records; the others are returned with the claim each is to be answered with (None: none found). The
        same key twice in one flush (a retry racing its first request in this process) counts once."""
        first: dict[str, Message] = {}
        for msg in claimed:
            first.setdefault(msg.claim.key, msg)
        fresh, earlier = await idempotency_store.claim(
            conn, self.workspace_id, self.env, [msg.claim for msg in first.values()])
        retries: list[tuple[Message, idempotency_store.Claim | None]] = []
        for msg in claimed:
            key = msg.claim.key
            if key in fresh and first[key] is msg:
                records.extend(msg.items)
                continue
            retries.append((msg, first[key].claim if key in fresh else earlier.get(key)))
            msg.size = 0  # nothing of it is stored: the ingestion counters leave it out
        return retries

    async def _segment_ops(self, conn: asyncpg.Connection, segment: list[tuple], records: list[EventRow],
                           traits: list[tuple]) -> list[tuple[str, str, datetime]]:
        """Claim the messageIds in this transaction and keep only the messages seen for the first time
        (a retried batch, even one racing its first delivery, stores nothing twice). Events join records and
        traits join traits, in call order; aliases are returned to run once the events are stored."""
        segment = _first_of_each(segment)
        fresh = await segment_store.claim_messages(
            conn, [(item[0], item[1]) for item in segment if item[1] is not None], datetime.now(UTC))
        aliases: list[tuple[str, str, datetime]] = []
        for source_id, message_id, op, data in segment:
            if message_id is not None and (source_id, message_id) not in fresh:
                continue
            if op == OP_EVENT:
                records.append(data)
            elif op == OP_TRAITS:
                traits.append(data)
            else:
                aliases.append(data)
        return aliases


def _first_of_each(segment: list[tuple]) -> list[tuple]:
    """The same messageId twice in one flush (a retry racing its first delivery): only the first counts."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for item in segment:
        if item[1] is not None:
            claim = (item[0], item[1])
            if claim in seen:
                continue
            seen.add(claim)
        kept.append(item)
    return kept


def _covered(erased: dict[str, datetime], user_id: str, received: datetime) -> bool:
    """Whether an erasure of the user came at or after this call was received (the trigger's test)."""
    at = erased.get(user_id)
    return at is not None and at >= received


def _merged(calls: list[tuple[str, dict, datetime, datetime]]) -> dict[str, tuple[dict, datetime]]:
    """Traits merge in call order; the time kept is the earliest, whatever order the calls came in."""
    traits: dict[str, tuple[dict, datetime]] = {}
    for user_id, new_traits, at, _ in calls:
        merged, first = traits.get(user_id, ({}, at))
        traits[user_id] = ({**merged, **new_traits}, min(first, at))
    return traits
