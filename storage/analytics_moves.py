"""Events moved to another user in PostgreSQL (a Segment alias, migration 0028), made so in the analytics store.

The alias lists the moved events in the outbox, so a round writes their new version like any new event; the
store then holds both versions (same sorting key, so a merge would collapse them some day, but a funnel or
retention reads without FINAL and would count the previous actor too). Once that outbox row is written, the
former version is deleted here: the listed ids whose user_id is still the former one. Deleting that version
only (not "every version but the newest") keeps the answer right when one event is moved twice, or erased
after the move (then the mirror writes nothing and this deletes the last copy)."""

from __future__ import annotations

import asyncpg

from storage.clickhouse import AnalyticsStore

# Only moves whose outbox row is gone: written in this round (deleted just before, in the same transaction)
# or an earlier one. Before that, deleting the former version would leave the events out of every read.
_READY = (
    "SELECT seq, workspace_id, env, old_user_id, ids FROM analytics_moves m "
    "WHERE NOT EXISTS (SELECT 1 FROM analytics_outbox o WHERE o.seq = m.outbox_seq) ORDER BY seq FOR UPDATE"
)
_DONE = "DELETE FROM analytics_moves WHERE seq = ANY($1::bigint[])"
# The former versions of every ready move's events in one DELETE (as the parameter's size allows: the store's
# delete_rows): each DELETE is a mutation of every part of the table, whatever it matches.
_FORMER = "(workspace_id, env, user_id, id) IN {rows:Array(Tuple(UInt64, String, String, String))}"


async def apply_moves(conn: asyncpg.Connection, store: AnalyticsStore) -> None:
    """Called in a mirror round's transaction, after it wrote and deleted outbox rows (a round that wrote none
    makes no move ready, and costs no query here)."""
    moves = await conn.fetch(_READY)
    former = [(m["workspace_id"], m["env"], m["old_user_id"], i) for m in moves for i in m["ids"]]
    await store.delete_rows("keyed_events", _FORMER, former)
    if moves:
        await conn.execute(_DONE, [m["seq"] for m in moves])
