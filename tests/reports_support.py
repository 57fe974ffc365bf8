"""Shared helpers for the report tests: seeding events and traits straight into PostgreSQL."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import asyncpg
from aiohttp.test_utils import TestClient

from storage import events as event_store
from storage import users as user_store
from storage import workspaces
from storage.db import init_connection
from storage.events import EventRow
from tests.conftest import bearer


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


async def workspace_id(database_url: str, name: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return (await workspaces.workspace_by_name(conn, name))["id"]
    finally:
        await conn.close()


async def set_plan(database_url: str, name: str, plan: str) -> None:
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        ws = await workspaces.workspace_by_name(conn, name)
        await workspaces.set_plan(conn, ws["id"], plan, {})
    finally:
        await conn.close()


async def seed(pool: asyncpg.Pool, ws: int, events: list[tuple], env: str = "live") -> None:
    """events: (name, actor, ISO time[, properties]); an actor 'anon:x' is anonymous_id x."""
    records = []
    for name, actor, when, *props in events:
        user, anon = (None, actor[5:]) if actor.startswith("anon:") else (actor, None)
        at = ts(when)
        records.append(EventRow(f"evt_{secrets.token_hex(8)}", ws, env, name, at, at, user_id=user, anonymous_id=anon,
                                properties=props[0] if props else {}))
    async with pool.acquire() as conn:
        await event_store.ensure_partitions(conn, {r.ts for r in records})
        await event_store.copy_events(conn, records)


async def seed_traits(pool: asyncpg.Pool, ws: int, traits: dict[str, dict], env: str = "live") -> None:
    async with pool.acquire() as conn:
        await user_store.merge_traits(conn, ws, env, {u: (t, ts("2024-01-01T00:00:00Z")) for u, t in traits.items()})


async def create_report(client: TestClient, key: str, body: dict, status: int = 201) -> dict:
    resp = await client.post("/v1/reports", json=body, headers=bearer(key))
    assert resp.status == status, await resp.text()
    return await resp.json()


async def run_report(client: TestClient, key: str, report_id: str, status: int = 200) -> dict:
    resp = await client.get(f"/v1/reports/{report_id}/run", headers=bearer(key))
    assert resp.status == status, await resp.text()
    return await resp.json()
