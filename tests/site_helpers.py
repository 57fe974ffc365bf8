"""Shared helpers of the site-API tests: posting events, registering sites, reading stored rows."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

import orjson

from app.views.sites import site_id_for
from storage import sites as site_store
from storage.workspaces import ensure_workspace
from tests.conftest import connect

BROWSER_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)
INGEST = "/api/service/event"


def unique_domain() -> str:
    return f"site-{secrets.token_hex(5)}.example"


async def post_event(client, body, headers: dict | None = None, *, content_type: str = "text/plain"):
    data = body if isinstance(body, bytes | str) else orjson.dumps(body)
    return await client.post(INGEST, data=data, headers={
        "Content-Type": content_type, "User-Agent": BROWSER_UA, **(headers or {})})


async def register_site(database_url: str, workspace: str, domain: str | None = None, *,
                        verified: bool = True) -> tuple[str, str]:
    """A site of the workspace, created in the database directly: (site id, domain)."""
    domain = domain or unique_domain()
    site_id = site_id_for(domain)
    conn = await connect(database_url)
    try:
        workspace_id = await ensure_workspace(conn, workspace)
        await site_store.create_site(conn, site_id, workspace_id, domain, secrets.token_hex(16))
        if verified:
            await site_store.mark_verified(conn, site_id)
    finally:
        await conn.close()
    return site_id, domain


async def stored_events(database_url: str, site_id: str) -> list[dict]:
    conn = await connect(database_url)
    try:
        rows = await conn.fetch("SELECT * FROM events WHERE site_id = $1 ORDER BY ts, id", site_id)
        return [dict(r) for r in rows]
    finally:
        await conn.close()


async def breakdown_rows(app, site_id: str, rows: list[dict], by: str) -> list[dict]:
    """The site's breakdown by a property as the dashboard reads it (the analytics store, once the mirror
    has caught up), every metric. The window runs from the first stored event to just after the last."""
    from app.appkeys import ANALYTICS, MIRROR
    from storage.analytics import Filters
    from storage.analytics_breakdown import breakdown

    await app[MIRROR].catch_up()
    start, end = min(r["ts"] for r in rows), max(r["ts"] for r in rows) + timedelta(seconds=1)
    return await breakdown(app[ANALYTICS], site_id, start, end, prop=by, filters=Filters(), goals=[], limit=100,
                           offset=0)


async def visits(app, site_id: str, rows: list[dict], by: str) -> dict[str, tuple]:
    """The site's visits broken down by entry or exit page: {page: (visits, pageviews, events, visit
    duration in ms)}."""
    return {r["key"]: (r["visits"], r["pageviews"], r["events"], r["visit_duration"])
            for r in await breakdown_rows(app, site_id, rows, by)}


def ms(delta: timedelta) -> int:
    return round(delta / timedelta(milliseconds=1))


class FakeClock:
    """Stands in for SiteRuntime.clock: time moves only when a test says so."""

    def __init__(self, start: datetime | None = None) -> None:
        # Default: 01:00 UTC yesterday, so a test can move hours ahead without crossing midnight, where
        # the daily visitor salt rotates and every visit starts over.
        self.now = start or (datetime.now(UTC) - timedelta(days=1)).replace(hour=1, minute=0, second=0,
                                                                            microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta) -> None:
        self.now = self.now + delta
