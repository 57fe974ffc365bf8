"""Who reads the analytics store when. Its read clients (storage.clickhouse.READERS) are handed out on the event
loop, so a read waiting for one holds no worker thread: asyncio.to_thread's pool is shared with the mirror's
inserts, password checks and the data sources, and reads blocked inside it would stall them all. And one owner
(a workspace: the app names it with reads_for) holds at most all but one of them, so one site's heavy dashboard
never leaves another workspace's small read waiting behind its queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar

# The owner of the reads of a task and of the tasks it starts (asyncio copies the context into them). None:
# the process's own reads (the CLI's, a derived row's), one more owner.
_OWNER: ContextVar[Hashable | None] = ContextVar("tally_read_owner", default=None)


def reads_for(owner: Hashable) -> None:
    """The analytics reads this task makes from now on, and those of the tasks it starts, are `owner`'s."""
    _OWNER.set(owner)


class _Owner:
    __slots__ = ("gate", "users")

    def __init__(self, slots: int) -> None:
        self.gate = asyncio.Semaphore(slots)
        self.users = 0  # reads holding or waiting for the gate: the entry goes when none is left


class ReadSlots:
    """`slots` reads at once, of which one owner holds at most slots - 1 (the one slot, if there is only one).
    Waiters are served in turn (asyncio.Semaphore)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.per_owner = max(1, slots - 1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._all = asyncio.Semaphore(slots)
        self._owners: dict[Hashable | None, _Owner] = {}

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold one slot for the current task's owner while the block runs."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a semaphore belongs to one event loop (each test runs its own)
            self._loop, self._all, self._owners = loop, asyncio.Semaphore(self.slots), {}
        owners, owner = self._owners, _OWNER.get()
        entry = owners.get(owner)
        if entry is None:
            entry = owners[owner] = _Owner(self.per_owner)
        entry.users += 1
        try:
            async with entry.gate, self._all:
                yield
        finally:
            entry.users -= 1
            if not entry.users and owners.get(owner) is entry:
                del owners[owner]
