"""A COPY of events out of PostgreSQL, inserted into the analytics store as it streams, in pieces no larger
than the store's bound allows (AnalyticsStore.insert_piece_bytes): the process holds at most two pieces, and
no insert is refused for its size, however many events the COPY carries. The store collapses rows written
twice by event id, so a COPY that fails after some pieces went in is simply written again.

Measured on the rebuild of 10M events: spooled whole to a temporary file (which chDB's client then copies into
another), it took 3.7 GB of temporary disk; in pieces, none beyond two pieces, at 1.13 GB peak RSS instead of
1.33, in the same time (64-66 s against 63-67)."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg

from storage.clickhouse import AnalyticsStore


def whole_rows(csv: bytearray) -> int:
    """The length of the whole rows at the start of `csv` (PostgreSQL's CSV, starting at a row): up to the
    last newline with an even number of quotes before it, since a quote inside a quoted field is doubled
    and a newline inside one is data."""
    odd = csv.count(b'"') % 2  # of the quotes before `end`
    end = len(csv)
    newline = csv.rfind(b"\n")
    while newline >= 0:
        odd ^= csv.count(b'"', newline, end) % 2
        if not odd:
            return newline + 1
        end, newline = newline, csv.rfind(b"\n", 0, newline)
    return 0


class Pieces:
    """A COPY's output, inserted into the store whenever `size` bytes or more of it are waiting. One piece is
    inserted (in a worker thread) while the next streams in: at most two are held at once."""

    def __init__(self, store: AnalyticsStore, size: int) -> None:
        self.store, self.size = store, size
        self.waiting = bytearray()
        self.inserting: asyncio.Future | None = None

    async def __call__(self, chunk: bytes) -> None:
        self.waiting += chunk
        if len(self.waiting) >= self.size:
            await self._insert(whole_rows(self.waiting))

    async def finish(self) -> None:
        await self._insert(len(self.waiting))
        await self._insert(0)

    async def abandon(self) -> None:
        """After a failed COPY: let the insert in flight end (its rows are committed events, written again by
        the next round or rebuild), so no thread outlives the COPY and its error is the COPY's."""
        with contextlib.suppress(Exception):
            await self._insert(0)

    async def _insert(self, length: int) -> None:
        """Wait for the insert in flight (its failure is the COPY's), then start one of `length` bytes."""
        if length or self.inserting is not None:
            inserting, self.inserting = self.inserting, None
            if inserting is not None:
                await inserting
            if length:
                piece = bytes(self.waiting[:length])
                del self.waiting[:length]
                self.inserting = asyncio.ensure_future(asyncio.to_thread(self.store.insert_events_csv_sync, piece))


async def copy_into(conn: asyncpg.Connection, store: AnalyticsStore, query: str, *args: object) -> int:
    """Insert the events a SELECT of analytics_mirror.EVENT_FIELDS returns; returns how many."""
    pieces = Pieces(store, store.insert_piece_bytes)
    try:
        copied = await conn.copy_from_query(query, *args, output=pieces, format="csv")
    except BaseException:
        await pieces.abandon()
        raise
    await pieces.finish()
    return int(copied.split()[-1])
