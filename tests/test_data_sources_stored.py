"""Sources stored by an older release: a run of one whose options no longer pass today's check ends in error
saying which field, rather than failing before it starts."""

from __future__ import annotations

from tests.test_data_sources import create, run_job, wait_status
from tests.test_data_sources_sql import pg_source, scratch_pg  # noqa: F401 (a fixture)


async def test_options_stored_before_a_stricter_check_end_in_error(client, make_key, scratch_pg, pool):  # noqa: F811
    """A table name with a final line break passed the check of older releases; a run of such a stored source
    failed before it started, and the source stayed `syncing` (its run failing again at each lease's end)."""
    database, _, port = scratch_pg
    key = await make_key("admin,read")
    created = await create(client, key, pg_source(database, port))
    await wait_status(client, key, created["id"], "active")
    await pool.execute(
        "UPDATE data_sources SET options = options || jsonb_build_object('table', 'signups' || chr(10)),"
        " next_sync_at = now() - interval '1 minute' WHERE id = $1",
        created["id"],
    )
    await run_job(client, pool, created["id"])
    body = await wait_status(client, key, created["id"], "error")
    assert body["status_reason"].startswith("the stored options are not valid (options.table: "), body
