"""GET/POST/DELETE /api/sites/{id}/goals: Plausible's Sites-API goal fields, session and workspace scoping."""

from __future__ import annotations

import re
import secrets

import pytest

from app.views.goals import MAX_GOALS
from tests.conftest import connect
from tests.site_helpers import register_site

GOAL_ID = re.compile(r"^goal_[0-9a-f]{32}$")
CREATED_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def goals_path(site: str, goal: str | None = None) -> str:
    return f"/api/sites/{site}/goals" + (f"/{goal}" if goal else "")


def without_volatile(goal: dict) -> dict:
    assert GOAL_ID.match(goal["id"]) and CREATED_AT.match(goal["createdAt"])
    return {k: v for k, v in goal.items() if k not in ("id", "createdAt")}


async def stored_goals(database_url: str, site: str) -> list[tuple]:
    conn = await connect(database_url)
    try:
        rows = await conn.fetch("SELECT goal_type, event_name, page_path FROM goals WHERE site_id = $1 "
                                "ORDER BY created_at, id", site)
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


@pytest.fixture
async def site(login, database_url, workspace) -> str:
    await login()
    site_id, _ = await register_site(database_url, workspace)
    return site_id


async def test_create_list_and_delete(client, site, database_url):
    resp = await client.post(goals_path(site), json={"goal_type": "event", "event_name": "signup"})
    assert resp.status == 201
    event_goal = await resp.json()
    assert without_volatile(event_goal) == {"display_name": "signup", "goal_type": "event", "event_name": "signup",
                                            "page_path": None}
    # Form fields work too, as in Plausible's Sites API.
    resp = await client.post(goals_path(site), data={"goal_type": "page", "page_path": "/thanks/**"})
    assert resp.status == 201
    page_goal = await resp.json()
    assert without_volatile(page_goal) == {"display_name": "Visit /thanks/**", "goal_type": "page",
                                           "event_name": None, "page_path": "/thanks/**"}

    listed = await client.get(goals_path(site))
    assert listed.status == 200
    assert await listed.json() == {"goals": [event_goal, page_goal]}

    deleted = await client.delete(goals_path(site, event_goal["id"]))
    assert deleted.status == 200 and await deleted.json() == {"deleted": True}
    assert await stored_goals(database_url, site) == [("page", None, "/thanks/**")]
    again = await client.delete(goals_path(site, event_goal["id"]))
    assert again.status == 404 and await again.json() == {"error": "goal not found"}


async def test_creating_the_same_goal_again_returns_it(client, site, database_url):
    first = await client.post(goals_path(site), json={"goal_type": "event", "event_name": " signup "})
    second = await client.post(goals_path(site), json={"goal_type": "event", "event_name": "signup"})
    assert (first.status, second.status) == (201, 200)
    assert await first.json() == await second.json()
    assert await stored_goals(database_url, site) == [("event", "signup", None)]


async def test_delete_by_the_creation_body_or_id(client, site, database_url):
    await client.post(goals_path(site), json={"goal_type": "page", "page_path": "/blog/*"})
    made = await (await client.post(goals_path(site), json={"goal_type": "event", "event_name": "trial"})).json()
    resp = await client.delete(goals_path(site), json={"goal_type": "page", "page_path": "/blog/*"})
    assert resp.status == 200 and await resp.json() == {"deleted": True}
    resp = await client.delete(goals_path(site), json={"id": made["id"]})
    assert resp.status == 200
    assert await stored_goals(database_url, site) == []
    missing = await client.delete(goals_path(site), json={"goal_type": "event", "event_name": "trial"})
    assert missing.status == 404 and await missing.json() == {"error": "goal not found"}


def issue(field: str, message: str) -> list[dict[str, str]]:
    return [{"field": field, "message": message}]


@pytest.mark.parametrize(("body", "issues"), [
    ({}, issue("goal_type", "must be event or page")),
    ({"goal_type": "visit", "event_name": "x"}, issue("goal_type", "must be event or page")),
    ({"goal_type": "event"}, issue("event_name", "required for an event goal")),
    ({"goal_type": "event", "event_name": "   "}, issue("event_name", "must be 1 to 64 characters")),
    ({"goal_type": "event", "event_name": "x" * 65}, issue("event_name", "must be 1 to 64 characters")),
    ({"goal_type": "event", "event_name": 7}, issue("event_name", "must be a string")),
    ({"goal_type": "event", "event_name": "a", "page_path": "/x"}, issue("page_path", "only for a page goal")),
    ({"goal_type": "page"}, issue("page_path", "required for a page goal")),
    ({"goal_type": "page", "page_path": "thanks"}, issue("page_path", "must start with /")),
    ({"goal_type": "page", "page_path": "/x", "event_name": "a"}, issue("event_name", "only for an event goal")),
    ({"goal_type": "page", "page_path": "/\u0000"}, issue("page_path", "must be 1 to 2048 characters")),
])
async def test_invalid_goals_are_400_and_store_nothing(client, site, database_url, body, issues):
    resp = await client.post(goals_path(site), json=body)
    assert resp.status == 400
    assert await resp.json() == {"error": "invalid goal", "issues": issues}
    assert await stored_goals(database_url, site) == []


@pytest.mark.parametrize(("raw", "answer"), [
    (b"{nope", {"error": "invalid json"}),
    (b"[1]", {"error": "invalid goal", "issues": [{"field": "", "message": "expected a JSON object"}]}),
])
async def test_bodies_that_are_not_json_objects(client, site, raw, answer):
    resp = await client.post(goals_path(site), data=raw, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert await resp.json() == answer


async def test_goals_per_site_are_capped(client, site, database_url):
    conn = await connect(database_url)
    try:
        await conn.executemany("INSERT INTO goals (id, site_id, goal_type, event_name) VALUES ($1, $2, 'event', $3)",
                               [(f"goal_{secrets.token_hex(16)}", site, f"e{i}") for i in range(MAX_GOALS)])
    finally:
        await conn.close()
    resp = await client.post(goals_path(site), json={"goal_type": "event", "event_name": "one-more"})
    assert resp.status == 409
    assert await resp.json() == {"error": "too many goals", "limit": MAX_GOALS}
    assert len(await stored_goals(database_url, site)) == MAX_GOALS


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/sites/x/goals"), ("POST", "/api/sites/x/goals"), ("DELETE", "/api/sites/x/goals"),
    ("DELETE", "/api/sites/x/goals/goal_1"),
])
async def test_session_required(client, method, path):
    resp = await client.request(method, path, json={"goal_type": "event", "event_name": "a"})
    assert resp.status == 401
    assert await resp.json() == {"error": "unauthorized"}


async def test_other_workspaces_sites_and_goals_are_404(client, login, database_url, workspace):
    await login()
    other_site, _ = await register_site(database_url, f"other-{workspace}")
    other_goal = f"goal_{secrets.token_hex(16)}"
    conn = await connect(database_url)
    try:
        await conn.execute("INSERT INTO goals (id, site_id, goal_type, event_name) VALUES ($1, $2, 'event', 'x')",
                           other_goal, other_site)
    finally:
        await conn.close()
    for method, path, body in (("GET", goals_path(other_site), None),
                               ("POST", goals_path(other_site), {"goal_type": "event", "event_name": "y"}),
                               ("DELETE", goals_path(other_site, other_goal), None),
                               ("GET", goals_path("no-such-site"), None)):
        resp = await client.request(method, path, json=body)
        assert resp.status == 404, (method, path)
        assert await resp.json() == {"error": "not found"}
    assert await stored_goals(database_url, other_site) == [("event", "x", None)]
    # A goal id of another site is not found through one's own site either.
    own, _ = await register_site(database_url, workspace)
    resp = await client.delete(goals_path(own, other_goal))
    assert resp.status == 404 and await resp.json() == {"error": "goal not found"}
    assert await stored_goals(database_url, other_site) == [("event", "x", None)]


async def test_goals_go_with_their_site(client, site, database_url):
    await client.post(goals_path(site), json={"goal_type": "event", "event_name": "signup"})
    conn = await connect(database_url)
    try:
        await conn.execute("DELETE FROM sites WHERE id = $1", site)
    finally:
        await conn.close()
    assert await stored_goals(database_url, site) == []


async def test_a_body_sent_in_small_chunks_is_read_whole(client, site, database_url):
    async def chunks():
        for part in (b'{"goal_type": "ev', b'ent", "event_na', b'me": "chunked"}'):
            yield part

    resp = await client.post(goals_path(site), data=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status == 201
    assert await stored_goals(database_url, site) == [("event", "chunked", None)]


async def test_oversized_body_is_413(client, site, database_url):
    resp = await client.post(goals_path(site), json={"goal_type": "event", "event_name": "x", "pad": "y" * 20_000})
    assert resp.status == 413
    assert await resp.json() == {"error": "payload too large", "limit": 16384}
    assert await stored_goals(database_url, site) == []
