"""Fixture data for the site analytics tests: one site with nine events and five sessions placed
relative to now, so every range (1h .. 90d) holds a known subset. Expected numbers in the tests are
worked out by hand from the table below."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from app.views.analytics_params import Window, window_for
from storage import analytics_mirror
from storage import events as events_store
from storage.clickhouse import AnalyticsStore
from storage.clickhouse_layout import ensure_schema
from storage.db import init_connection
from storage.events import EventRow
from storage.ids import new_id
from storage.workspaces import ensure_workspace

M, H, D = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)

# (key, name, path, referrer template, country, visitor, session, age, props)
EVENTS = [
    (1, "pageview", "/", "https://www.google.com/search?q=x", "US", "v1", "s1", 2 * H, None),
    (2, "pageview", "/pricing?utm=1", "", "US", "v1", "s1", 2 * H - M, None),
    (3, "pageview", "/", "https://news.ycombinator.com/item?id=1", "DE", "v2", "s2", 3 * H, None),
    (4, "signup", "/pricing", None, "US", "v1", "s1", 2 * H - 2 * M, {"plan": "pro"}),
    (5, "pageview", "/blog/a", "https://blog.{domain}/x", "FR", "v3", "s3", 5 * D, None),
    (6, "pageview", "/", "https://google.com/", "US", "v3", "s3", 5 * D - M, None),
    (7, "pageview", "/old", None, "DE", "v4", "s4", 40 * D, None),
    (8, "outbound", "/", None, "US", "v2", "s2", 3 * H - 30 * timedelta(seconds=1), {"href": "https://x.io"}),
    (9, "pageview", "/live", None, "US", "v5", "s5", 10 * M, None),
]
# (session, age of start, duration, pageviews, events)
SESSIONS = [
    ("s1", 2 * H, 2 * M, 2, 3),
    ("s2", 3 * H, 30 * timedelta(seconds=1), 1, 2),
    ("s3", 5 * D, M, 2, 2),
    ("s4", 40 * D, timedelta(0), 1, 1),
    ("s5", 10 * M, timedelta(0), 1, 1),
]


@dataclass
class SiteFixture:
    site_id: str
    domain: str
    workspace_id: int
    now: datetime
    ids: dict[int, str]  # fixture key -> stored event id
    ts: dict[int, datetime]


def store_of_its_own(shared: AnalyticsStore, name: str, cluster: str | None) -> AnalyticsStore:
    """A store in a database of its own on the run's engine (plain, or in cluster mode), its tables made."""
    store = AnalyticsStore(shared.client, f"{shared.database}_{name}_{secrets.token_hex(3)}", cluster,
                           query_settings=dict(shared.query_settings))
    ensure_schema(store)
    return store


async def create_site(conn: asyncpg.Connection, workspace: str) -> tuple[str, str, int]:
    workspace_id = await ensure_workspace(conn, workspace)
    token = secrets.token_hex(4)
    site_id, domain = f"site-{token}", f"{token}.example"
    await conn.execute(
        "INSERT INTO sites (id, workspace_id, domain, verification_token) VALUES ($1, $2, $3, 'tok')",
        site_id, workspace_id, domain,
    )
    return site_id, domain, workspace_id


async def insert_events(conn: asyncpg.Connection, site_id: str, workspace_id: int, rows: list[tuple]) -> None:
    """rows: (id, name, path, referrer, country, ip_hash, session_id, ts, props)."""
    await events_store.ensure_partitions(conn, {r[7] for r in rows})
    records = [
        EventRow(eid, workspace_id, "live", name, ts, ts, site_id=site_id, session_id=sid, properties=props,
                 url=f"https://example.test{path}", path=path, referrer=ref, title=f"Title {path}", viewport_w=1280,
                 country=country, ip_hash=ip)
        for eid, name, path, ref, country, ip, sid, ts, props in rows
    ]
    await events_store.copy_events(conn, records)


def window_ending_inside_a_day() -> Window:
    """The 7-day window of three hours ago: it ends on the hour, inside a day (never at midnight), with time
    left after its end for add_visits_around_end."""
    w = window_for("7d", datetime.now(UTC) - 3 * H)
    return w if w.end.hour else window_for("7d", datetime.now(UTC) - 4 * H)


async def add_visits_around_end(database_url: str, site_id: str, end: datetime) -> None:
    """Two visits from NZ around `end`: one with a pageview of / ten minutes before it and one of /on ten
    minutes after, and one whose only pageview (of /) is five minutes after it."""
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        ws = await conn.fetchval("SELECT workspace_id FROM sites WHERE id = $1", site_id)
        await insert_events(conn, site_id, ws, [
            (f"evt_in_{site_id}", "pageview", "/", "", "NZ", f"stay-{site_id}", f"stay-{site_id}", end - 10 * M, None),
            (f"evt_on_{site_id}", "pageview", "/on", "", "NZ", f"stay-{site_id}", f"stay-{site_id}", end + 10 * M,
             None),
            (f"evt_after_{site_id}", "pageview", "/", "", "NZ", f"later-{site_id}", f"later-{site_id}", end + 5 * M,
             None)])
    finally:
        await conn.close()


async def add_signup_goal(database_url: str, site_id: str) -> None:
    """The site's goal: the `signup` event."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("INSERT INTO goals (id, site_id, goal_type, event_name) VALUES ($1, $2, 'event', 'signup')",
                           f"g1-{site_id}", site_id)
    finally:
        await conn.close()


async def load_fixture(database_url: str, workspace: str) -> SiteFixture:
    conn = await asyncpg.connect(database_url)
    try:
        from storage.db import init_connection

        await init_connection(conn)
        site_id, domain, workspace_id = await create_site(conn, workspace)
        now = datetime.now(UTC)
        ids, stamps, rows = {}, {}, []
        for key, name, path, ref, country, visitor, sid, age, props in EVENTS:
            ids[key], stamps[key] = new_id("evt"), now - age
            ref = ref.format(domain=domain) if ref is not None else None
            rows.append((ids[key], name, path, ref, country, f"{visitor}-{site_id}", f"{sid}-{site_id}",
                         stamps[key], props))
        await insert_events(conn, site_id, workspace_id, rows)  # the events trigger makes the sessions
        return SiteFixture(site_id, domain, workspace_id, now, ids, stamps)
    finally:
        await conn.close()


def truncate(moment: datetime, unit: str) -> datetime:
    if unit == "minute":
        return moment.replace(second=0, microsecond=0)
    if unit == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def write_site_events_again(db, database_url: str, site_id: str, first: int = 50) -> int:
    """What a crash between the store's insert and the outbox delete leaves behind: the site's stored events
    written to the store again as the mirror sends them, all of them and then the first `first` once more.
    Returns how many events the site has."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await analytics_mirror.site_events_csv(conn, site_id)
    finally:
        await conn.close()
    lines = rows.splitlines(keepends=True)
    await analytics_mirror.write_events(db, rows)
    await analytics_mirror.write_events(db, b"".join(lines[:first]))
    return len(lines)
