"""A graceful stop leaves no lease behind: the scheduled job stopped while its claim of a source was under way
(the lease taken in PostgreSQL, the answer not read yet) dropped the claim, and the source stayed leased to no
one for LEASE_SECONDS (15 minutes) after the restart."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import asyncpg

from app.appkeys import SCHEDULER
from app.sources.runner import SourceRunner
from tests.test_data_sources import park_other_sources, run_job, wait_status
from tests.test_data_sources_http import charge, customer, named
from tests.test_data_sources_schedule import hold_charges, stripe_source

CLAIM_WAITS = """SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND query LIKE '%UPDATE data_sources%FOR UPDATE SKIP LOCKED%'"""


class DueBehindALock:
    """Makes a source due in a transaction that holds data_sources against writes, from a thread and
    connection of its own: a claim waits for it, and once let through, the test can wait for PostgreSQL to
    commit the claim while the event loop (and with it the claimer, which has not read its answer yet)
    stands still."""

    def __init__(self, dsn: str, source_id: str) -> None:
        self.dsn, self.source_id = dsn, source_id
        self.held, self.release, self.leased = threading.Event(), threading.Event(), threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._hold()), daemon=True)

    async def _hold(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE data_sources IN SHARE MODE")  # other UPDATEs wait; reads do not
                await conn.execute("UPDATE data_sources SET next_sync_at = now() - interval '1 minute' "
                                   "WHERE id = $1", self.source_id)
                self.held.set()
                await asyncio.to_thread(self.release.wait, 60)
            for _ in range(1200):
                if await conn.fetchval("SELECT lease_until > now() FROM data_sources WHERE id = $1", self.source_id):
                    self.leased.set()
                    return
                await asyncio.sleep(0.05)
        finally:
            await conn.close()


async def test_a_claim_cut_off_by_a_graceful_stop_gives_its_lease_back(
        client, make_client, make_key, settings, stripe, pool, database_url, monkeypatch):
    fake, url = stripe
    fake.customers, fake.charges = [customer(1, 1_700_000_000)], [charge(1, 1, 1_700_000_100)]
    key = await make_key("admin,read")
    source = await stripe_source(client, key, url)
    await park_other_sources(pool, source)
    await hold_charges(fake)  # a run started now waits at its charges

    # A second process with the scheduler on, its sync job every few milliseconds, on one pool connection.
    monkeypatch.setattr("app.sources.runner.JOB_SECONDS", 0.02)
    rounds = []
    run_due = SourceRunner.run_due

    async def counted_run_due(runner: SourceRunner) -> None:
        rounds.append(None)
        await run_due(runner)

    monkeypatch.setattr(SourceRunner, "run_due", counted_run_due)
    second = await make_client(dataclasses.replace(settings, run_scheduler=True, pool_max=1))
    # Once a round has ended (nothing was due), the claim is a statement its connection has prepared, so it
    # waits for the lock in its execution, all of it sent: let through, it commits with no word from Tally.
    for _ in range(1200):
        if len(rounds) >= 2:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the second process's sync job did not run")
    held = DueBehindALock(database_url, source)
    held.thread.start()
    try:
        assert await asyncio.to_thread(held.held.wait, 60)
        for _ in range(1200):
            if await pool.fetchval(CLAIM_WAITS):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the scheduled job never claimed the source")
        held.release.set()
        assert held.leased.wait(60), "the claim did not commit"  # the event loop stands still meanwhile
        # The graceful stop: the scheduler first (its job cancelled mid-claim), then the rest.
        await second.app[SCHEDULER].stop()
        await second.close()
    finally:
        held.release.set()
        fake.charges_gate.set()
        await asyncio.to_thread(held.thread.join, 60)

    # Nothing holds the source: the restarted process's job syncs it at once.
    assert await pool.fetchval("SELECT lease_until FROM data_sources WHERE id = $1", source) is None
    await run_job(client, pool, source)
    body = await wait_status(client, key, source, "active", "error")
    assert body["status"] == "active", body
    assert sorted(e["properties"]["charge_id"] for e in await named(client, key, "charge_succeeded")) == [
        "ch_1", "ch_2"]
