"""The actor of one workspace and key environment: keyed /v1 events and identify calls."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from actors.base import Actor, Message
from storage import events as event_store
from storage import users as user_store
from storage.events import COL

EVENTS = "events"
IDENTIFY = "identify"


def month_start(ts: datetime) -> datetime:
    ts = ts.astimezone(UTC)
    return datetime(ts.year, ts.month, 1, tzinfo=UTC)


class PartitionCache:
    """Months known to have an events partition in this process (shared by all actors)."""

    def __init__(self) -> None:
        self.known: set[datetime] = set()

    async def ensure(self, pool: asyncpg.Pool, stamps: set[datetime]) -> None:
        missing = {month_start(ts) for ts in stamps} - self.known
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
        records: list[tuple] = []
        traits: dict[str, tuple[dict, datetime]] = {}
        for msg in batch:
            if msg.kind == EVENTS:
                records.extend(msg.items)
            else:
                for user_id, new_traits, at in msg.items:
                    merged, first = traits.get(user_id, ({}, at))
                    traits[user_id] = ({**merged, **new_traits}, first)
        await self.partitions.ensure(self.pool, {r[COL["ts"]] for r in records})
        async with self.connection() as conn:
            if not traits:
                # One statement: the events trigger checks erasures and keeps profiles (migration 0009).
                await event_store.copy_events(conn, records)
                return
            async with conn.transaction():
                if records:
                    await event_store.copy_events(conn, records)
                await user_store.merge_traits(conn, self.workspace_id, self.env, traits)
