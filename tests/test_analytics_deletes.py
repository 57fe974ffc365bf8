"""Deletes in the analytics store (erasures, the former versions of events a Segment alias moved): each
DELETE is a mutation of every part of keyed_events whatever it matches, so a round makes one for all it
has queued rather than one per user or alias (more only past a budget of parameter characters), and the
embedded engine reaches every part in one wave."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from storage import analytics_mirror as mirror
from storage import clickhouse, segment
from storage.clickhouse import AnalyticsStore, param_batches
from storage.clickhouse_layout import ensure_schema
from storage.db import init_connection
from storage.events import EventRow, copy_events, erase_user
from storage.ids import new_id
from storage.migrate import migrate
from storage.workspaces import ensure_workspace
from tests.test_analytics_durability import drop_database, fresh_database


@pytest.fixture
async def conn(pg_admin_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    dsn = await fresh_database(pg_admin_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await init_connection(conn)
        await migrate(conn)
        yield conn
    finally:
        await conn.close()
        await drop_database(pg_admin_dsn, dsn)


@pytest.fixture(scope="module")
def store(analytics_store: AnalyticsStore) -> AnalyticsStore:
    """A database of this module's own in the run's store: its mutations are counted apart from the others'."""
    store = AnalyticsStore(analytics_store.client, f"{analytics_store.database}_deletes",
                           query_settings=dict(analytics_store.query_settings))
    ensure_schema(store)
    return store


async def stored(conn: asyncpg.Connection, store: AnalyticsStore, *, users: list[str],
                 anonymous: list[str]) -> tuple[int, list[str]]:
    """Two events of each user and of each anonymous id, committed and mirrored; (workspace, their ids)."""
    workspace_id = await ensure_workspace(conn, f"deletes-{new_id('w')}")
    now = datetime.now(UTC)
    await conn.execute("SELECT tally_ensure_event_partition($1)", now)
    rows = [EventRow(new_id("evt"), workspace_id, "live", "seen", now, now, user_id=u) for u in users for _ in "ab"]
    rows += [EventRow(new_id("evt"), workspace_id, "live", "seen", now, now, anonymous_id=a)
             for a in anonymous for _ in "ab"]
    await copy_events(conn, rows)
    await mirror.mirror_round(conn, store, limit=10_000)
    return workspace_id, [r.id for r in rows]


async def mutations(store: AnalyticsStore) -> int:
    return (await store.query("SELECT count() FROM system.mutations WHERE database = {d:String} "
                              "AND table = 'keyed_events'", {"d": store.database}))[0][0]


async def actors(store: AnalyticsStore, ids: list[str]) -> dict[str, int]:
    """Each actor's events among `ids`, every copy counted (no FINAL: as funnels and retention read)."""
    rows = await store.query(f"SELECT actor, count() FROM {store.table('keyed_events')} "
                             "WHERE id IN {ids:Array(String)} GROUP BY actor", {"ids": ids})
    return dict(rows)


async def test_erasures_queued_together_are_one_delete_and_erase_exactly_their_users(conn, store):
    workspace_id, ids = await stored(conn, store, users=["u0", "u1", "u2", "u3"], anonymous=["u1", "a9"])
    for user in ("u0", "u1", "u2"):
        await erase_user(conn, workspace_id, "live", user, datetime.now(UTC))
    before = await mutations(store)

    await mirror.mirror_round(conn, store, limit=10_000)

    assert await mutations(store) - before == 1
    # u1's anonymous events went with it (storage/events.erase_user); another anonymous id's stayed.
    assert await actors(store, ids) == {"u3": 2, "anon:a9": 2}
    assert await conn.fetchval("SELECT count(*) FROM analytics_erasures") == 0


async def test_moves_ready_in_one_round_are_one_delete_and_leave_each_event_once(conn, store):
    workspace_id, ids = await stored(conn, store, users=["old1", "old2", "u3"], anonymous=["anon-a"])
    for previous, target in (("old1", "new1"), ("old2", "new2"), ("anon-a", "new1")):
        await segment.alias(conn, workspace_id, "live", previous, target)
    before = await mutations(store)

    await mirror.mirror_round(conn, store, limit=10_000)

    assert await mutations(store) - before == 1
    assert await actors(store, ids) == {"new1": 4, "new2": 2, "u3": 2}
    assert await conn.fetchval("SELECT count(*) FROM analytics_moves") == 0


async def test_erasures_past_a_statements_parameter_budget_take_several_deletes_and_miss_none(
        conn, store, monkeypatch):
    """A server reads a command's parameters from its URL: a round's rows go in statements of bounded size."""
    workspace_id, ids = await stored(conn, store, users=["u0", "u1", "u2", "u3"], anonymous=["u1", "a9"])
    for user in ("u0", "u1", "u2"):
        await erase_user(conn, workspace_id, "live", user, datetime.now(UTC))
    row = len(str(workspace_id)) + 4 + len("live") + 4 + len("u0") + 4  # param_batches' measure of a row
    monkeypatch.setattr(clickhouse, "PARAM_CHARS", row * 5 // 2)  # room for two rows, not three
    before = await mutations(store)

    await mirror.mirror_round(conn, store, limit=10_000)

    assert await mutations(store) - before == 2  # two users' rows, then the third's
    assert await actors(store, ids) == {"u3": 2, "anon:a9": 2}


def test_parameter_batches_keep_every_row_in_order_within_the_budget(monkeypatch):
    monkeypatch.setattr(clickhouse, "PARAM_CHARS", 60)
    rows = [(1, "live", "u" * n) for n in (1, 20, 3, 70, 5, 6)]
    batches = list(param_batches(rows))
    assert [r for b in batches for r in b] == rows
    assert [len(b) for b in batches] == [2, 1, 1, 2]  # the 70-character id alone, over the budget
    assert list(param_batches([])) == []


def test_the_embedded_engine_queues_a_mutation_on_every_part_at_once(store):
    """chDB's own 2 threads x 2 tasks reached 50 parts in waves half a second apart (bench/deletes.py)."""
    rows = store.client.query("SELECT value FROM system.server_settings "
                              "WHERE name = 'background_merges_mutations_concurrency_ratio'").result_rows
    assert int(rows[0][0]) == 64
