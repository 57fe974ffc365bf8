"""The actor of one site: assigns sessions, COPYs the batch's events (the events triggers list them for
the analytics mirror in the same statement), then feeds the realtime window.

The open sessions and the realtime window must outlive an idle actor: they are created once per app
(app/server.py) and handed to every site actor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from actors.base import Actor, AfterCommit, Message
from actors.realtime import LiveEvent, MemoryRealtime, RedisRealtime
from actors.sessions import MemorySessions, RedisSessions, SidMode, VisitIn
from actors.workspace import PartitionCache
from storage import events as event_store
from storage.clickhouse_schema import ENGAGEMENT
from storage.events import EventRow

log = logging.getLogger("tally.site")

SITE_EVENTS = "site_events"


@dataclass(slots=True)
class SiteItem:
    record: EventRow  # session_id: the client's sid, or None; the actor stores the visit's
    visitor: str  # daily visitor key (a hash)
    sid_mode: SidMode = None  # how the sid relates to visits (actors/sessions.py); None without one


# How a visit arrived: EventRow's utm_source .. channel (app/acquisition.py), one block of fields.
ACQUISITION = slice(EventRow._fields.index("utm_source"), EventRow._fields.index("channel") + 1)
ACQUISITION_FIELDS = EventRow._fields[ACQUISITION]


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


class SiteActor(Actor):
    kind = "site"

    def __init__(self, key: tuple[str, str], pool: asyncpg.Pool, partitions: PartitionCache,
                 sessions: MemorySessions | RedisSessions, realtime: MemoryRealtime | RedisRealtime,
                 **tuning) -> None:
        super().__init__(key, **tuning)
        self.site_id = key[1]
        self.pool = pool
        self.partitions = partitions
        self.sessions = sessions
        self.realtime = realtime

    async def flush(self, batch: list[Message]) -> AfterCommit:
        items: list[SiteItem] = [item for msg in batch for item in msg.items]
        records = await self._with_sessions(items)
        await self.partitions.ensure(self.pool, {r.ts for r in records})
        async with self.connection() as conn:
            # One statement: its trigger lists the rows for the analytics mirror (migrations 0017, 0021).
            await event_store.copy_events(conn, records)
        # Committed: only now may the realtime window show these events (once the submitters are answered).
        return lambda: self._publish(records)

    async def _with_sessions(self, items: list[SiteItem]) -> list[EventRow]:
        """Each event with its visit's id and acquisition (UTM fields, source, channel)."""
        # Unreachable Redis falls back to memory inside assign(); another Redis error is a store error
        # for the actor (actors.base.STORE_ERRORS): the submitters get "store failed", the actor lives on.
        assigned = await self.sessions.assign(self.site_id, [
            VisitIn(item.visitor, _ms(item.record.ts), item.record.session_id, item.sid_mode,
                    item.record[ACQUISITION]) for item in items])
        return [item.record._replace(session_id=visit.session_id,
                                     **dict(zip(ACQUISITION_FIELDS, visit.acquisition, strict=True)))
                for item, visit in zip(items, assigned, strict=True)]

    async def _publish(self, records: list[EventRow]) -> None:
        # Engagement events report on a page already counted; the live view counts events and pageviews.
        live = [LiveEvent(r.id, r.name, r.path, r.country, r.session_id, _ms(r.ts)) for r in records
                if r.name != ENGAGEMENT]
        if not live:
            return
        try:
            await self.realtime.record(self.site_id, live)
        except Exception:
            # The events are stored; a lost realtime update only dims the live view for a minute (an
            # unreachable Redis is handled, once per outage, inside record()).
            log.exception("realtime update failed site=%s", self.site_id)
