"""The job scheduler: one runner per round across processes, without holding a pool connection."""

import asyncio

from app.appkeys import POOL, SCHEDULER


async def test_a_running_job_holds_no_pool_connection_and_is_not_run_twice(client):
    scheduler, pool = client.app[SCHEDULER], client.app[POOL]
    started, release = asyncio.Event(), asyncio.Event()

    async def job() -> None:
        started.set()
        await release.wait()

    async def pool_goes_idle() -> bool:
        """Other timers (the analytics mirror's round, say) borrow connections for a moment; a job that
        held one for its whole run would keep the pool from ever being idle while it runs."""
        for _ in range(250):
            if pool.get_size() == pool.get_idle_size():
                return True
            await asyncio.sleep(0.02)
        return False

    scheduler.every("test_hold", 3600, job)
    first = asyncio.create_task(scheduler.run_now("test_hold"))
    await started.wait()
    assert await pool_goes_idle()  # the advisory lock lives on the scheduler's own connection
    assert await scheduler.run_now("test_hold") is False  # the round is taken, in this process too
    release.set()
    assert await first is True
    release.clear()
    started.clear()
    second = asyncio.create_task(scheduler.run_now("test_hold"))
    await started.wait()
    release.set()
    assert await second is True  # the lock was released after the first round
