"""Breakdowns by event dimensions (browser, device, source, UTM source, country, a custom property, page) with
every metric agree exactly with a straightforward PostgreSQL query on a generated data set, filtered or not, as
the other aggregates do (tests/test_analytics_engine.py) and the entry and exit pages (test_analytics_visits.py).
Visitors-only reads, which take the window's ended days from cached states, are compared too."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from app.appkeys import ANALYTICS, MIRROR
from app.views.analytics_params import window_for
from storage import analytics as store
from storage import analytics_breakdown
from storage import events as events_store
from storage.db import init_connection
from storage.events import EventRow
from storage.site_filters import Filter
from tests.analytics_support import create_site

PATHS = ["/", "/pricing", "/blog/a", "/blog/b?x=1", "/docs#top"]
BROWSERS = ["Chrome", "Firefox", "Safari", None]
DEVICES = ["desktop", "mobile", None]
SOURCES = ["Google", "Twitter", None]
COUNTRIES = ["US", "DE", None]


async def generated_visits(database_url: str, workspace: str, n: int = 1500) -> tuple[str, str]:
    """n site events over the last 35 days, 40 % of the visits in the last two: ~150 visitors, visits of 1-5
    events each with one browser, device, source and country (as a visit has), pages and a `plan` property
    varying by event."""
    rnd = random.Random(3)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        site_id, domain, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        rows: list[EventRow] = []
        while len(rows) < n:
            visitor, session = f"v{rnd.randrange(150)}", f"s{len(rows)}"
            days = 2 if rnd.random() < 0.4 else 35  # the 24-hour window has visits enough too
            start = now - timedelta(minutes=rnd.randrange(days * 24 * 60))
            browser, device, source = rnd.choice(BROWSERS), rnd.choice(DEVICES), rnd.choice(SOURCES)
            country = rnd.choice(COUNTRIES)
            for k in range(rnd.randrange(1, 6)):
                ts = start + timedelta(seconds=rnd.randrange(1, 900) * k, microseconds=rnd.randrange(10**6))
                if ts < now:
                    path = rnd.choice(PATHS)
                    rows.append(EventRow(
                        f"e{len(rows)}_{site_id}", ws, "live", rnd.choice(["pageview"] * 4 + ["signup"]), ts, ts,
                        site_id=site_id, session_id=session, properties={"plan": rnd.choice(["a", "b"])},
                        url=f"https://{domain}{path}", path=path, country=country, ip_hash=visitor, browser=browser,
                        device=device, source=source, utm_source=source and source.lower()))
        await events_store.ensure_partitions(conn, {r.ts for r in rows})
        await events_store.copy_events(conn, rows)
    finally:
        await conn.close()
    return site_id, domain


PAGE = "split_part(split_part(coalesce(path, ''), '#', 1), '?', 1)"
FILTERS = {  # the store's terms, and the same spelled for PostgreSQL
    "none": ([], ""),
    "country": ([Filter("country", "==", "DE")], " AND country = 'DE'"),
    "page": ([Filter("page", "~=", "blog")], f" AND strpos(lower({PAGE}), 'blog') > 0"),
    "browser+country": ([Filter("browser", "!=", "Firefox"), Filter("country", "!=", "US")],
                        " AND coalesce(browser, '') <> 'Firefox' AND coalesce(country, '') <> 'US'"),
    "prop": ([Filter("props:plan", "==", "a")], " AND properties ->> 'plan' = 'a'"),
    "event": ([Filter("event", "==", "signup")], " AND name = 'signup'"),
}
KEYS = {"browser": "coalesce(browser, '')", "device": "coalesce(device, '')", "source": "coalesce(source, '')",
        "utm_source": "coalesce(utm_source, '')", "country": "coalesce(country, '')",
        "props:plan": "coalesce(properties ->> 'plan', '')", "page": PAGE}

# Per key, over the matching events of the window (a page breakdown counts pageviews, unless an event term
# chooses the events): distinct visitors and visits, pageviews and events; and over the visits holding one of
# them (their events from the day before the window's to its end), how many had exactly one pageview and
# their summed duration. Ranked by visitors, then key.
REFERENCE = """
WITH m AS (SELECT {key} AS key, ip_hash, session_id, name FROM events
           WHERE site_id = $1 AND ts >= $2 AND ts < $3{where}),
     s AS (SELECT session_id, extract(epoch FROM max(ts) - min(ts)) * 1000000 AS us,
                  count(*) FILTER (WHERE name = 'pageview') AS pv
           FROM events WHERE site_id = $1 AND ts >= $4 AND ts < $3 GROUP BY session_id),
     v AS (SELECT k.key, count(*) AS n, count(*) FILTER (WHERE s.pv = 1) AS b, sum(s.us) AS us
           FROM (SELECT DISTINCT key, session_id FROM m) k JOIN s USING (session_id) GROUP BY k.key)
SELECT m.key, count(DISTINCT m.ip_hash) AS visitors, count(DISTINCT m.session_id) AS visits,
       count(*) FILTER (WHERE m.name = 'pageview') AS pageviews, count(*) AS events, v.n, v.b, v.us
FROM m JOIN v USING (key) WHERE m.key <> '' GROUP BY m.key, v.n, v.b, v.us
ORDER BY visitors DESC, m.key COLLATE "C" LIMIT 10
"""


@pytest.mark.parametrize("range_name", ["24h", "7d", "30d"])
async def test_event_dimension_breakdowns_match_postgresql(client, database_url, workspace, range_name):
    site_id, domain = await generated_visits(database_url, workspace)
    db = client.app[ANALYTICS]
    await client.app[MIRROR].catch_up()
    w = window_for(range_name)
    conn = await asyncpg.connect(database_url)
    try:
        for case, (terms, pg) in FILTERS.items():
            for prop, key in KEYS.items():
                where = pg + (" AND name = 'pageview'" if prop == "page" and case != "event" else "")
                expected = [
                    {"key": r["key"], "visitors": r["visitors"], "visits": r["visits"], "pageviews": r["pageviews"],
                     "events": r["events"], "bounce_rate": round(100 * r["b"] / r["n"], 2),
                     "visit_duration": round(float(r["us"]) / r["n"] / 1000)}
                    for r in await conn.fetch(REFERENCE.format(key=key, where=where), site_id, w.start, w.end,
                                              store.lookback_start(w.start))]
                assert expected, (case, prop)  # the data set gives every case rows
                got = await analytics_breakdown.breakdown(
                    db, site_id, w.start, w.end, prop=prop, filters=store.Filters(extra=tuple(terms)), goals=[],
                    limit=10, offset=0, domain=domain)
                assert got == expected, (case, prop)
                if not terms:  # visitors alone: the ended days from cached states, made by the first read
                    for _ in range(2):
                        only = await analytics_breakdown.breakdown(
                            db, site_id, w.start, w.end, prop=prop, filters=store.Filters(), goals=[], limit=10,
                            offset=0, domain=domain, metrics=["visitors"])
                        assert [(r["key"], r["visitors"]) for r in only] == [
                            (r["key"], r["visitors"]) for r in expected], prop
    finally:
        await conn.close()
