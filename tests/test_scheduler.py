"""The job scheduler: one runner per round across processes, without holding a pool connection."""

import asyncio

from app.appkeys import POOL, SCHEDULER


async def test_a_running_job_holds_no_pool_connection_and_is_not_run_twice(client):
    scheduler, pool = client.app[SCHEDULER], client.app[POOL]
    started, release = asyncio.Event(), asyncio.Event()
    in_use = []

    async def job() -> None:
        in_use.append(pool.get_size() - pool.get_idle_size())
        started.set()
        await release.wait()

    scheduler.every("test_hold", 3600, job)
    first = asyncio.create_task(scheduler.run_now("test_hold"))
    await started.wait()
    assert in_use == [0]  # the advisory lock lives on the scheduler's own connection
    assert await scheduler.run_now("test_hold") is False  # the round is taken, in this process too
    release.set()
    assert await first is True
    release.clear()
    started.clear()
    second = asyncio.create_task(scheduler.run_now("test_hold"))
    await started.wait()
    release.set()
    assert await second is True  # the lock was released after the first round
