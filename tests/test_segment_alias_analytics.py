"""Segment's alias moves the previous id's events to the new id in PostgreSQL; the analytics store (funnels,
retention, event volume) and erasure must see the move too, also when the anonymous events were mirrored
before the alias came."""

from __future__ import annotations

from app.appkeys import ANALYTICS
from tests.conftest import bearer
from tests.reports_support import create_report, run_report, workspace_id
from tests.test_segment_api import basic, create_source, mid

DAY = "2026-11-20"


async def send(client, h: dict, kind: str, **body) -> None:
    resp = await client.post(f"/v1/{kind}", headers=h, json={"messageId": mid(), **body})
    assert resp.status == 200, await resp.text()


async def funnel(client, key: str) -> list[int]:
    report = await create_report(client, key, {"name": "F", "type": "funnel", "config": {
        "events": ["signup_started", "signup_completed"], "from": f"{DAY}T00:00:00Z", "to": f"{DAY}T23:59:59Z"}})
    return [row[2] for row in (await run_report(client, key, report["id"]))["rows"]]


async def copies(client, database_url: str, workspace: str, final: bool = False) -> list[tuple]:
    db = client.app[ANALYTICS]
    return sorted(await db.query(
        f"SELECT name, user_id, actor FROM {db.table('keyed_events')}{' FINAL' if final else ''} "
        "WHERE workspace_id = {w:UInt64}", {"w": await workspace_id(database_url, workspace)}))


async def test_alias_after_the_anonymous_events_were_mirrored(client, make_key, workspace, database_url):
    key = await make_key("read,write,admin")
    h = basic((await create_source(client, key))["write_key"])
    await send(client, h, "track", anonymousId="anon_f", event="Signup Started", timestamp=f"{DAY}T10:00:00Z")
    assert await funnel(client, key) == [1, 0]  # the report's catch-up has mirrored the anonymous event
    await send(client, h, "alias", previousId="anon_f", userId="user_f")
    await send(client, h, "track", userId="user_f", event="Signup Completed", timestamp=f"{DAY}T10:05:00Z")
    assert await funnel(client, key) == [1, 1]
    assert await copies(client, database_url, workspace) == [
        ("signup_completed", "user_f", "user_f"), ("signup_started", "user_f", "user_f")]


async def test_erasing_the_aliased_user_leaves_no_anonymous_copy(client, make_key, workspace, database_url):
    key = await make_key("read,write,admin")
    h = basic((await create_source(client, key))["write_key"])
    await send(client, h, "track", anonymousId="anon_e", event="Signup Started", timestamp=f"{DAY}T09:00:00Z")
    await send(client, h, "track", userId="old_e", event="Signup Started", timestamp=f"{DAY}T09:30:00Z")
    assert await funnel(client, key) == [2, 0]
    await send(client, h, "alias", previousId="anon_e", userId="user_e")
    await send(client, h, "alias", previousId="old_e", userId="user_e")
    assert (await client.delete("/v1/users/user_e", headers=bearer(key))).status == 204
    assert await funnel(client, key) == [0, 0]
    assert await copies(client, database_url, workspace) == []
    assert await copies(client, database_url, workspace, final=True) == []


async def test_erasing_an_anonymous_profile_erases_its_events(client, make_key, workspace, database_url, pool):
    """identify with only an anonymousId makes a profile under that id (so a later alias can merge it), and
    GET /v1/users/{id} shows it: erasing it must take the events sent under that anonymousId too."""
    key = await make_key("read,write,admin")
    h = basic((await create_source(client, key))["write_key"])
    await send(client, h, "track", anonymousId="anon_g", event="Signup Started", timestamp=f"{DAY}T08:00:00Z",
               properties={"email": "g@example.com"})
    await send(client, h, "identify", anonymousId="anon_g", traits={"email": "g@example.com"})
    assert await funnel(client, key) == [1, 0]
    assert (await client.get("/v1/users/anon_g", headers=bearer(key))).status == 200
    assert (await client.delete("/v1/users/anon_g", headers=bearer(key))).status == 204
    assert await pool.fetchval("SELECT count(*) FROM events WHERE anonymous_id = 'anon_g'") == 0
    assert await funnel(client, key) == [0, 0]
    assert await copies(client, database_url, workspace) == []
