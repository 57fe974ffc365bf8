"""Parameter-dependent statements stay on custom plans however often a pooled connection repeats them.

asyncpg prepares every statement; PostgreSQL's default plan_cache_mode switches a prepared statement to
a generic plan after five executions, which turned a 250 ms funnel into a 30 s one on the sixth run.
"""

from __future__ import annotations

from storage import events as event_store
from tests.reports_support import seed, workspace_id


async def test_a_query_run_ten_times_on_one_connection_keeps_custom_plans(client, make_key, pool, workspace,
                                                                         database_url):
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    await seed(pool, ws, [("view", "a", "2024-03-01T10:00:00Z"), ("signup", "a", "2024-03-01T11:00:00Z")])
    async with pool.acquire() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
        for _ in range(10):
            rows = await event_store.list_events(conn, ws, "live", filters={"event": "view"}, after=None,
                                                 limit=10)
            assert [r["name"] for r in rows] == ["view"]
        plans = await conn.fetchrow(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'SELECT id, name, user_id%' AND statement LIKE '%name = $3%'"
        )
    assert plans["generic_plans"] == 0
    assert plans["custom_plans"] == 10


async def test_the_server_pool_sets_custom_plans_on_its_connections(client):
    from app.appkeys import POOL

    async with client.app[POOL].acquire() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
