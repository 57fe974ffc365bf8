"""The analytics store's read clients are handed out on the event loop (storage/read_slots.py): reads waiting
for one hold no worker thread of the pool the mirror's inserts and password checks share, and one workspace's
queue of reads leaves a client for another workspace's read. Ordering only: the slow reads take 2 s each, the
others are answered while the first of those still run."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from storage.clickhouse import READERS, AnalyticsStore
from storage.read_slots import reads_for

SLOW = "SELECT sleep(2)"


async def test_reads_waiting_for_a_client_hold_no_worker_thread(analytics_store: AnalyticsStore):
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(READERS + 1))
    reads = [asyncio.create_task(analytics_store.query(SLOW)) for _ in range(2 * READERS)]
    await asyncio.sleep(0.2)  # the first READERS have started in their threads
    assert await asyncio.to_thread(lambda: "ran") == "ran"
    assert not any(read.done() for read in reads)  # it ran while they still did: a thread was free
    assert await asyncio.gather(*reads) == [[(0,)]] * (2 * READERS)


async def test_a_workspace_with_many_reads_leaves_a_client_to_another(analytics_store: AnalyticsStore):
    finished: list[str] = []

    async def read(owner: str, sql: str, tag: str) -> None:
        reads_for(owner)
        await analytics_store.query(sql)
        finished.append(tag)

    heavy = [asyncio.create_task(read("workspace-a", SLOW, f"a{i}")) for i in range(2 * READERS)]
    await asyncio.sleep(0.2)  # workspace a's reads are running or waiting
    small = asyncio.create_task(read("workspace-b", "SELECT 1", "b"))
    await asyncio.gather(*heavy, small)
    assert finished[0] == "b"
    assert sorted(finished) == sorted([*(f"a{i}" for i in range(2 * READERS)), "b"])
