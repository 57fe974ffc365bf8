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
        ts = COL["ts"]
        await self.partitions.ensure(self.pool, {r[ts] for r in records})
        async with self.connection() as conn, conn.transaction():
            kept = await event_store.drop_erased(conn, self.workspace_id, self.env, records)
            if kept:
                await event_store.copy_events(conn, kept)
            await user_store.record_activity(conn, self.workspace_id, self.env, _activity(kept))
            await user_store.merge_traits(conn, self.workspace_id, self.env, traits)


def _activity(records: list[tuple]) -> dict[str, tuple[datetime, datetime, int]]:
    uid, ts, recv = COL["user_id"], COL["ts"], COL["received_at"]
    out: dict[str, tuple[datetime, datetime, int]] = {}
    for r in records:
        user = r[uid]
        if user is None:
            continue
        seen = out.get(user)
        if seen is None:
            out[user] = (r[recv], r[ts], 1)
        else:
            out[user] = (min(seen[0], r[recv]), max(seen[1], r[ts]), seen[2] + 1)
    return out
