"""The analytics store against PostgreSQL: every site aggregate and the keyed event volume agree exactly
with a straightforward PostgreSQL query on a generated data set; the mirror misses nothing when batches
commit out of order, counts nothing twice, and erasure leaves no trace in any analytics read."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import random
import re
import secrets
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from app.appkeys import ANALYTICS, MIRROR
from app.views.analytics_params import window_for
from storage import analytics as store
from storage import analytics_lists, analytics_mirror, analytics_overview, analytics_pieces, report_queries
from storage.clickhouse import READ_NICE, READERS, AnalyticsStore
from storage.clickhouse_schema import INPUT_COLUMNS
from storage.db import init_connection
from storage.site_filters import Filter
from tests.analytics_support import create_site, insert_events, write_site_events_again
from tests.conftest import bearer
from tests.reports_support import create_report, run_report, seed, workspace_id


def page_key(path: str | None) -> str:
    """What the store's page is: the path without query string or fragment; '' when none."""
    return (path or "").split("#", 1)[0].split("?", 1)[0]


def referrer_host(referrer: str | None) -> str:
    """What the store's referrer host is: lower-cased, no scheme, user info, port or "www."; '' when empty
    or not an absolute URL."""
    h = (referrer or "").lower()
    if not re.match(r"[a-z][a-z0-9+.-]*://", h):
        return ""
    h = h[h.index("://") + 3:]
    h = h.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    return h[4:] if h.startswith("www.") else h


PATHS = ["/", "/pricing", "/blog/a", "/blog/b?x=1", "/blog/deep/c", "/docs#top", "/Blog/A"]
REFS = ["", "https://www.google.com/search?q=1", "https://news.ycombinator.com/", "http://sub.{d}/x",
        "https://{d}/", "android-app://com.slack", "https://user@Example.org:8080/p", "not a url",
        "news.example/no-scheme"]
COUNTRIES = ["US", "DE", "FR", None, ""]
NAMES = ["pageview"] * 6 + ["signup", "outbound"]


async def generated_site(database_url: str, workspace: str, n: int = 1500, seed_: int = 7):
    """n random site events over the last 40 days: ~120 visitors, sessions of a few events each."""
    rnd = random.Random(seed_)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        site_id, domain, ws = await create_site(conn, workspace)
        now = datetime.now(UTC)
        rows, i = [], 0
        while i < n:
            visitor, start = f"v{rnd.randrange(120)}-{site_id}", now - timedelta(minutes=rnd.randrange(40 * 24 * 60))
            session = f"s{i}-{site_id}"
            for k in range(rnd.randrange(1, 6)):
                ts = start + timedelta(seconds=37 * k, microseconds=rnd.randrange(10**6))
                if ts >= now:
                    continue
                ref = rnd.choice(REFS).format(d=domain)
                rows.append((f"evt_gen_{site_id}_{i}", rnd.choice(NAMES), rnd.choice(PATHS), ref,
                             rnd.choice(COUNTRIES), visitor, session, ts, {"plan": rnd.choice(["a", "b"])}))
                i += 1
        await insert_events(conn, site_id, ws, rows)
    finally:
        await conn.close()
    return site_id, domain


PG_WHERE = {
    # The same filters spelled for PostgreSQL, for the comparison.
    "none": ([], ""),
    "path": ([Filter("page", "~=", "blog")],
             " AND strpos(lower(split_part(split_part(path, '#', 1), '?', 1)), 'blog') > 0"),
    "country": ([Filter("country", "==", "DE")], " AND country = 'DE'"),
    "not-country+ref": ([Filter("country", "!=", "US"), Filter("referrer", "~=", "google")],
                        " AND coalesce(country, '') <> 'US' AND strpos(lower(referrer), 'google') > 0"),
    "wildcard": ([Filter("page", "==", "/blog/**")],
                 " AND split_part(split_part(path, '#', 1), '?', 1) LIKE '/blog/%'"),
    "not-page": ([Filter("page", "!=", "/pricing")], " AND split_part(split_part(path, '#', 1), '?', 1) <> '/pricing'"),
    "one-segment": ([Filter("page", "==", "/blog/*")],
                    " AND split_part(split_part(path, '#', 1), '?', 1) ~ '^/blog/[^/]*$'"),
    "event": ([Filter("event", "==", "signup")], " AND name = 'signup'"),  # series and tops: of signups
    "prop": ([Filter("props:plan", "==", "a")], " AND properties ->> 'plan' = 'a'"),
}


# Ranges in a site's time zone: New York's windows of days run from one of its midnights to another (and its
# 90 days hold a change of summer time), Kolkata's hours begin at half past UTC ones (so its days cannot be
# summed from the UTC hours' rows, as New York's are).
@pytest.mark.parametrize(("range_name", "zone"), [
    ("24h", "UTC"), ("7d", "UTC"), ("30d", "UTC"), ("90d", "UTC"),
    ("24h", "Asia/Kolkata"), ("30d", "Asia/Kolkata"), ("30d", "America/New_York"), ("90d", "America/New_York")])
@pytest.mark.parametrize("case", list(PG_WHERE))
async def test_every_site_aggregate_matches_postgresql(client, database_url, workspace, range_name, zone, case):
    site_id, domain = await generated_site(database_url, workspace)
    db = client.app[ANALYTICS]
    await client.app[MIRROR].catch_up()
    terms, pg = PG_WHERE[case]
    filters = store.Filters(extra=tuple(terms))
    w = window_for(range_name, time_zone=zone)
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        scope = "site_id = $1 AND ts >= $2 AND ts < $3" + pg
        args = (site_id, w.start, w.end)
        row = await conn.fetchrow(
            f"SELECT count(*) AS e, count(*) FILTER (WHERE name = 'pageview') AS p, count(DISTINCT ip_hash) AS v "
            f"FROM events WHERE {scope}", *args)
        assert await store.totals(db, site_id, w.start, w.end, filters) == store.Totals(row["e"], row["p"], row["v"])

        sessions = await conn.fetchrow(
            "WITH s AS (SELECT session_id, min(ts) AS first, max(ts) AS last, "
            "count(*) FILTER (WHERE name = 'pageview') AS pv FROM events WHERE site_id = $1 AND ts < $3 "
            "GROUP BY session_id HAVING min(ts) >= $2) "
            "SELECT count(*) AS n, count(*) FILTER (WHERE pv = 1) AS b, "
            "coalesce(avg(extract(epoch FROM last - first) * 1000), 0)::float8 AS ms FROM s "
            f"WHERE session_id IN (SELECT session_id FROM events WHERE {scope})", *args)
        got = await store.session_stats(db, site_id, w.start, w.end, filters)
        assert (got.sessions, got.bounces, round(got.avg_ms, 3)) == (sessions["n"], sessions["b"],
                                                                    round(sessions["ms"], 3))

        # Series and top lists count one event name: the filtered one, else pageviews.
        name = "signup" if case == "event" else "pageview"
        scope = scope.replace(" AND name = 'signup'", "")
        first, last = w.buckets(w.unit)
        expected = {r["b"]: r["n"] for r in await conn.fetch(
            f"SELECT date_trunc('{w.unit}', ts, $5) AS b, count(*) AS n FROM events "
            f"WHERE {scope} AND name = $4 GROUP BY 1", *args, name, zone)}
        points = await analytics_lists.series(db, site_id, w.start, w.end, name=name, interval=w.unit,
                                              first=first, last=last, filters=filters, time_zone=zone)
        assert sum(v for _, v in points) == sum(expected.values())
        assert {b: v for b, v in points if v} == expected

        raw = await conn.fetch(f"SELECT path, referrer, country FROM events WHERE {scope} AND name = $4",
                               *args, name)
        tops = {}
        for dim, key in (("p", lambda r: page_key(r["path"])), ("c", lambda r: r["country"] or ""),
                         ("r", lambda r: referrer_host(r["referrer"]))):
            counts: dict[str, int] = {}
            for r in raw:
                k = key(r)
                if not k or (dim == "r" and (k == domain or k.endswith("." + domain))):
                    continue
                counts[k] = counts.get(k, 0) + 1
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            got_rows, total = await analytics_lists.top(db, site_id, w.start, w.end, dim=dim, name=name,
                                                        domain=domain, limit=5, filters=filters)
            assert (got_rows, total) == (ranked, sum(counts.values())), dim
            tops[dim] = (got_rows, total)

        # The overview's combined queries give exactly the numbers of the separate ones compared above.
        assert await analytics_overview.overview(db, site_id, w.start, w.end, name=name, interval=w.unit, first=first,
                                    last=last, domain=domain, limit=5, filters=filters, time_zone=zone) == (
            await store.totals(db, site_id, w.start, w.end, filters), got, tops, points)
    finally:
        await conn.close()


TRICKY = [  # (path, referrer): what browsers and hand-written clients send
    ("/blog/b?x=1#f", "https://www.Google.com/search?q=1"),
    ("/a#frag?notquery", "https://user@Example.org:8080/p"),
    ("/q?", "android-app://com.slack"),
    ("", ""),
    ("/new\nline?x", "HTTP://WWW.Sub.Example.COM"),
    ("/comma, \"quoted\" 'single'", "https://a:b@www.x.io:443/?u=http://evil.test/"),
    (" /leading space", "no-scheme.example/path"),
    ("/ünïcode/路径", "https://münchen.example/"),
    ("/www.", "https://www./"),
]


async def test_the_store_derives_page_and_referrer_host_as_the_reference_does(client, database_url, workspace):
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC) - timedelta(minutes=1)
        await insert_events(conn, site_id, ws, [
            (f"evt_tricky_{site_id}_{i}", "pageview", path, ref, "DE", f"v{i}", f"s{i}", now, None)
            for i, (path, ref) in enumerate(TRICKY)])
    finally:
        await conn.close()
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    got = await db.query(f"SELECT id, page, referrer, referrer_host FROM {db.table('site_events')} FINAL "
                         "WHERE site_id = {s:String}", {"s": site_id})
    by_id = {r[0]: r[1:] for r in got}
    assert len(by_id) == len(TRICKY)
    for i, (path, ref) in enumerate(TRICKY):
        assert by_id[f"evt_tricky_{site_id}_{i}"] == (page_key(path), ref, referrer_host(ref)), (path, ref)


async def test_keyed_event_volume_matches_postgresql(client, make_key, pool, workspace, database_url):
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    rnd = random.Random(3)
    base = datetime(2024, 5, 1, tzinfo=UTC)
    events = [(rnd.choice(["a", "b", "c"]), f"u{rnd.randrange(30)}",
               (base + timedelta(minutes=rnd.randrange(20 * 24 * 60))).isoformat(), {"plan": rnd.choice(["x", 1])})
              for _ in range(800)]
    await seed(pool, ws, events)
    await client.app[MIRROR].catch_up()
    start, end = base, base + timedelta(days=14)
    async with pool.acquire() as conn:
        expected = {(r["b"], r["name"], r["g"]): r["n"] for r in await conn.fetch(
            "SELECT date_trunc('day', ts, 'UTC') AS b, name, properties ->> 'plan' AS g, count(*) AS n FROM events "
            "WHERE workspace_id = $1 AND env = 'live' AND site_id IS NULL AND name = ANY($2) AND ts >= $3 "
            "AND ts <= $4 GROUP BY 1, 2, 3", ws, ["a", "b"], start, end)}
        rows = (await report_queries.event_volume(client.app[ANALYTICS], conn, ws, "live", events=["a", "b"],
                                                  start=start, end=end, interval="day", group_kind="properties",
                                                  group_path=["plan"])).rows
    assert {(r.bucket, r.event, r.grp): r.n for r in rows if r.n} == expected
    assert sum(r.n for r in rows) == sum(expected.values()) > 0


async def test_batches_committed_out_of_order_are_all_mirrored(client, database_url, workspace):
    """A naive "sequence > last seen" tailer would skip the first batch: it commits after the second."""
    conn = await asyncpg.connect(database_url)
    late = await asyncpg.connect(database_url)
    await init_connection(conn)
    await init_connection(late)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        now = datetime.now(UTC) - timedelta(minutes=5)
        mk = lambda i: (f"evt_ooo_{site_id}_{i}", "pageview", "/", "", "US", "v", f"s{i}-{site_id}", now, None)  # noqa: E731
        tx = late.transaction()
        await tx.start()
        await insert_events(late, site_id, ws, [mk(1)])  # takes the lower outbox sequence, commits last
        await insert_events(conn, site_id, ws, [mk(2)])
        await client.app[MIRROR].catch_up()
        w = window_for("24h")
        db = client.app[ANALYTICS]
        assert (await store.totals(db, site_id, w.start, w.end, store.Filters())).events == 1
        await tx.commit()
        await client.app[MIRROR].catch_up()
        assert (await store.totals(db, site_id, w.start, w.end, store.Filters())).events == 2
    finally:
        await conn.close()
        await late.close()


async def test_a_batch_written_twice_counts_once(client, database_url, workspace):
    """What a crash between the store's insert and the outbox delete leaves behind: the same rows again."""
    site_id, _ = await generated_site(database_url, workspace, n=200)
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    w = window_for("90d")
    before = await store.totals(db, site_id, w.start, w.end, store.Filters())
    sessions = await store.session_stats(db, site_id, w.start, w.end, store.Filters())
    assert before.events == await write_site_events_again(db, database_url, site_id) >= 200
    assert await store.totals(db, site_id, w.start, w.end, store.Filters()) == before
    assert await store.session_stats(db, site_id, w.start, w.end, store.Filters()) == sessions


async def test_erasure_removes_the_user_from_every_analytics_read(client, make_key, workspace, database_url):
    key = await make_key("read,write,admin")
    at = "2024-06-03T10:00:00Z"
    batch = [{"event": "buy", "user_id": user, "timestamp": at, "properties": {"k": user}}
             for user in ("gone", "gone", "stays")]
    resp = await client.post("/v1/events/batch", json={"events": batch}, headers=bearer(key))
    assert resp.status in (200, 202), await resp.text()
    report = await create_report(client, key, {"name": "V", "type": "event_volume", "config": {
        "events": ["buy"], "from": "2024-06-03T00:00:00Z", "to": "2024-06-03T23:59:59Z",
        "group_by": "properties.k"}})
    counts = lambda result: {r[2]: r[3] for r in result["rows"] if r[3]}  # noqa: E731
    assert counts(await run_report(client, key, report["id"])) == {"gone": 2, "stays": 1}

    assert (await client.delete("/v1/users/gone", headers=bearer(key))).status == 204
    db = client.app[ANALYTICS]
    left = await db.query(f"SELECT count() FROM {db.table('keyed_events')} FINAL WHERE user_id = {{u:String}} "
                          "AND workspace_id = {w:UInt64}",
                          {"u": "gone", "w": await workspace_id(database_url, workspace)})
    assert left == [(0,)]
    assert counts(await run_report(client, key, report["id"])) == {"stays": 1}
    # A rebuild from PostgreSQL cannot bring the user back either.
    async with client.app[MIRROR]._lock, client.app[MIRROR].pool.acquire() as conn:
        assert await analytics_mirror.rebuild(conn, db, since=datetime(2024, 6, 1, tzinfo=UTC)) >= 1
    assert counts(await run_report(client, key, report["id"])) == {"stays": 1}


async def test_the_event_loop_answers_while_the_store_works(client):
    """Store calls run in a worker thread: a request is served while a query is still running."""
    db = client.app[ANALYTICS]
    running = asyncio.create_task(db.query("SELECT sleep(2)"))
    await asyncio.sleep(0.1)  # the query has started in its thread
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert not running.done()
    assert await running == [(0,)]


async def test_reads_run_beside_each_other_and_writes_one_at_a_time(analytics_store: AnalyticsStore):
    """Reads go through the store's read clients: one answers while another is still running. Writes go
    through one client, one after the other (what lets an embedded day's counts trust their clock)."""
    db = analytics_store
    assert READERS >= 2
    slow = asyncio.create_task(db.query("SELECT sleep(2)"))
    await asyncio.sleep(0.1)  # started in its thread, on one read client
    assert await db.query("SELECT 1") == [(1,)]
    assert not slow.done()
    assert await slow == [(0,)]
    # Finishing order, not one wake-up's done set: on a loaded machine the second write ends within the moment
    # the loop takes to notice the first (CI saw both done at once).
    finished = []
    first = asyncio.create_task(db.command("SELECT sleep(1)"))
    first.add_done_callback(lambda _: finished.append("sleep"))
    await asyncio.sleep(0.1)
    second = asyncio.create_task(db.command("SELECT 1"))
    second.add_done_callback(lambda _: finished.append("select 1"))
    await asyncio.gather(first, second)
    assert finished == ["sleep", "select 1"]  # the second write waited for the first


def _running_query_threads() -> dict[str, int]:
    """Thread id -> nice value of this process's running ClickHouse query threads (QueryPipelineEx,
    QueryPullPipeEx)."""
    nices = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if stat[stat.index("(") + 1:stat.rindex(")")].startswith("Query") and fields[0] == "R":
            nices[tid] = int(fields[16])
    return nices


def _query_thread_nices(done: threading.Event, seen: Counter) -> None:
    """Until `done`: how often a running query thread was seen at each nice value. Counted per sample rather than
    taken per thread: a pooled thread runs a moment at its former priority before a query sets its own, and at
    the normal one again once the query has restored it, moments that a sampler on a loaded machine sometimes
    catches (CI saw {0, 10} twice, once with the latest value per thread)."""
    while not done.is_set():
        seen.update(_running_query_threads().values())
        done.wait(0.005)


def _wait_until_no_query_runs(quiet: float = 0.5, timeout: float = 60.0) -> None:
    """Until no query thread has run for `quiet` seconds. The store is shared by the whole run, and a query an
    earlier test started in a worker thread runs to its end after that test's event loop has gone."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet:
        assert time.monotonic() < deadline, "a query of an earlier test is still running"
        if _running_query_threads():
            quiet_since = time.monotonic()
        time.sleep(0.005)


async def test_reads_leave_the_cpu_to_the_event_loop_and_writes_do_not(analytics_store: AnalyticsStore):
    """Embedded, a read's threads run at nice READ_NICE, so ingestion's event loop keeps its CPU while a
    dashboard reads; writes (the mirror's inserts, whose lag has a bound) keep the normal priority."""
    busy = "SELECT sum(cityHash64(number) % 7) FROM numbers_mt(300000000)"
    for call, expected in ((analytics_store.query, {READ_NICE}), (analytics_store.command, {0})):
        await asyncio.to_thread(_wait_until_no_query_runs)
        seen: Counter = Counter()
        done = threading.Event()
        sampler = threading.Thread(target=_query_thread_nices, args=(done, seen))
        sampler.start()
        try:
            await call(busy)
        finally:
            done.set()
            sampler.join()
        # The query's threads run seconds at their priority; the moments around it are a few samples at most.
        assert {nice for nice, samples in seen.items() if samples >= 0.9 * seen.total()} == expected, seen


def _resident_file_bytes() -> int:
    """This process's resident pages that map files (RssFile): a file read through a mapping shows here."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("RssFile:"))
    return int(line.split()[1]) * 1024


def _site_events_csv(site_id: str, count: int, pad: int) -> bytes:
    """count site events in the mirror's CSV (INPUT_COLUMNS), each with a property of `pad` characters."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for i in range(count):
        row = dict.fromkeys(INPUT_COLUMNS, "")
        row.update(id=f"evt_big_{site_id}_{i}", workspace_id="1", env="live", site_id=site_id, name="pageview",
                   ts=f"2026-01-01 00:{i // 6000 % 60:02d}:{i // 100 % 60:02d}.{i:06d}", session_id=f"s{i // 5}",
                   ip_hash=f"v{i // 20}", path="/", properties='{"pad": "%s"}' % ("x" * pad))
        writer.writerow(row.values())
    return out.getvalue().encode()


async def test_an_insert_is_not_mapped_into_the_process(analytics_store: AnalyticsStore):
    """chDB inserts a batch from a spooled file. Read through a mapping (chDB's default), a rebuild's month of
    1.9 GB put 2 GB of file pages into the process; read with pread, a 64 MB batch adds next to nothing."""
    site_id = f"site-big-{secrets.token_hex(4)}"
    await asyncio.to_thread(analytics_store.insert_events_csv_sync, _site_events_csv(site_id, 100, 10))  # warm up
    data = _site_events_csv(site_id + "-x", 16_384, 4_000)
    before, peak, done = _resident_file_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _resident_file_bytes())
            done.wait(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        await asyncio.to_thread(analytics_store.insert_events_csv_sync, data)
    finally:
        done.set()
        sampler.join()
    rows = await analytics_store.query(f"SELECT count() FROM {analytics_store.table('site_events')} "
                                       "WHERE site_id = {s:String}", {"s": site_id + "-x"})
    assert rows == [(16_384,)]
    assert len(data) > 64 * 2**20
    assert peak[0] - before < len(data) // 8, (peak[0] - before, len(data))


async def test_a_copy_cut_anywhere_is_inserted_in_whole_rows(client, database_url, workspace):
    """A rebuild streams each month out of PostgreSQL and inserts it in pieces cut between CSV rows: a newline
    or a quote inside a field is data, and a row longer than a piece waits for its end. The rows come from
    PostgreSQL's own CSV (their transaction rolled back, so only the pieces write them)."""
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        site_id, _, ws = await create_site(conn, workspace)
        tricky = ['/a"b', "/line\nbreak", '/q"\n"q,', "/long/" + "x" * 1000, "/plain"]
        at = datetime(2024, 2, 28, 23, tzinfo=UTC)
        rows = [(f"evt_piece_{site_id}_{i:03d}", "pageview", tricky[i % 5], f'https://r.example/"{i}"\n', "DE",
                 f"v{i % 7}", f"s{i % 11}", at + timedelta(minutes=7 * i), {"k": f'x"\n{i}'}) for i in range(60)]
        uncommitted = conn.transaction()
        await uncommitted.start()
        try:
            await insert_events(conn, site_id, ws, rows)
            data = await analytics_mirror.site_events_csv(conn, site_id)
            expected = [tuple(r) for r in await conn.fetch(
                "SELECT id, path, referrer, properties::text FROM events WHERE site_id = $1 ORDER BY id", site_id)]
        finally:
            await uncommitted.rollback()
    finally:
        await conn.close()
    assert b"\n\"" in data and data.count(b"\n") > len(rows)  # newlines inside quoted fields
    db = client.app[ANALYTICS]
    pieces = analytics_pieces.Pieces(db, 300)
    for i in range(0, len(data), 97):  # chunks ending anywhere: mid-row, mid-field, between doubled quotes
        await pieces(data[i:i + 97])
    await pieces.finish()
    got = await db.query(f"SELECT id, page, referrer, properties FROM {db.table('site_events')} "
                         "WHERE site_id = {s:String} ORDER BY id", {"s": site_id})
    assert got == expected
