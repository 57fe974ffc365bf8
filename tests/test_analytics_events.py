"""GET /api/analytics/events and /export, and the access rules shared by every analytics route."""

from __future__ import annotations

import asyncio
import csv
import io

import asyncpg
import orjson
import pytest

from storage.db import init_connection
from tests.analytics_support import create_site, iso, load_fixture

ROUTES = ["overview", "timeseries", "top-pages", "top-referrers", "top-countries", "events", "export"]
NEWEST_FIRST_7D = [9, 4, 2, 1, 8, 3, 6, 5]


@pytest.fixture
async def site(client, database_url, workspace, login):
    await login()
    return await load_fixture(database_url, workspace)


async def test_event_log_newest_first_with_fields(client, site):
    resp = await client.get("/api/analytics/events", params={"siteId": site.site_id})
    assert resp.status == 200
    body = await resp.json()
    assert (body["total"], body["limit"], body["offset"]) == (8, 50, 0)
    assert [e["id"] for e in body["events"]] == [site.ids[k] for k in NEWEST_FIRST_7D]
    signup = body["events"][1]
    assert signup == {
        "id": site.ids[4], "name": "signup", "url": "https://example.test/pricing", "path": "/pricing",
        "referrer": None, "title": "Title /pricing", "viewportW": 1280, "props": {"plan": "pro"},
        "sessionId": f"s1-{site.site_id}", "country": "US", "createdAt": iso(site.ts[4]),
    }


async def test_event_log_paging_filter_and_clamp(client, site):
    body = await (await client.get("/api/analytics/events",
                                   params={"siteId": site.site_id, "limit": "3", "offset": "2"})).json()
    assert [e["id"] for e in body["events"]] == [site.ids[k] for k in (2, 1, 8)]
    assert (body["total"], body["limit"], body["offset"]) == (8, 3, 2)
    body = await (await client.get("/api/analytics/events", params={
        "siteId": site.site_id, "eventName": "pageview", "range": "90d"})).json()
    assert body["total"] == 7 and len(body["events"]) == 7
    body = await (await client.get("/api/analytics/events", params={"siteId": site.site_id, "range": "1h"})).json()
    assert body["total"] == 1 and body["events"][0]["id"] == site.ids[9]
    body = await (await client.get("/api/analytics/events", params={"siteId": site.site_id, "limit": "9999"})).json()
    assert body["limit"] == 500
    body = await (await client.get("/api/analytics/events", params={"siteId": site.site_id, "offset": "50"})).json()
    assert body["events"] == [] and body["total"] == 8
    for params in ({"offset": "-1"}, {"limit": "0"}, {"limit": "ten"}):
        resp = await client.get("/api/analytics/events", params={"siteId": site.site_id, **params})
        assert resp.status == 400


async def test_event_log_offset_is_bounded(client, site):
    """An offset is read past by PostgreSQL row by row: 8,000,000 took 61 s on a pool connection (90-day
    walk-through), so a few requests held the dashboard's pool. Past 100,000 (2,000 pages of 50) it is a 400
    that points to the export; up to it, the page (empty past the end) as before."""
    at_bound = await client.get("/api/analytics/events", params={"siteId": site.site_id, "offset": "100000"})
    assert at_bound.status == 200 and (await at_bound.json())["events"] == []
    for filtered in ({}, {"filter": "country==US"}):
        resp = await client.get("/api/analytics/events", params={"siteId": site.site_id, "offset": "100001",
                                                                 **filtered})
        assert resp.status == 400
        assert await resp.json() == {"error": "offset too large", "maxOffset": 100000,
                                     "detail": "narrow the range or the filters, or export the events"}


async def test_event_log_takes_the_overviews_filters(client, site):
    """The event log lists what the overview's filters match, as the export does (it listed every event of
    the range under any filter but the event name): total and pages are of the matching events."""
    async def logged(**params: str | list) -> tuple[list[str], int]:
        resp = await client.get("/api/analytics/events", params=[
            ("siteId", site.site_id), ("range", "90d"),
            *((k, x) for k, v in params.items() for x in (v if isinstance(v, list) else [v]))])
        assert resp.status == 200, await resp.text()
        body = await resp.json()
        return [e["id"] for e in body["events"]], body["total"]

    ids = site.ids
    assert await logged(country="US", filter="page==/") == ([ids[1], ids[8], ids[6]], 3)
    assert await logged(country="US", filter="page==/", limit="1", offset="1") == ([ids[8]], 3)
    assert await logged(eventName="pageview", filter="country==US") == ([ids[k] for k in (9, 2, 1, 6)], 4)
    assert await logged(eventName="pageview", filter="country==US", limit="2", offset="2") == ([ids[1], ids[6]], 4)
    assert await logged(filter=["event!=pageview", "country!=DE"]) == ([ids[4], ids[8]], 2)
    assert await logged(path="blog") == ([ids[5]], 1)
    assert await logged(filter="browser==Lynx") == ([], 0)
    assert await logged(filter="country==US", offset="9") == ([], 6)
    resp = await client.get("/api/analytics/events", params={"siteId": site.site_id, "filter": "shoe==1"})
    assert resp.status == 400 and (await resp.json())["error"] == "invalid filter"


async def test_export_csv(client, site):
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "range": "90d"})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/csv")
    assert resp.headers["Content-Disposition"] == f'attachment; filename="tally-{site.site_id}-90d.csv"'
    assert resp.headers["X-Export-Limit"] == "10000"
    table = list(csv.reader(io.StringIO(await resp.text())))
    assert table[0] == ["id", "createdAt", "name", "url", "path", "referrer", "title", "viewportW", "sessionId",
                        "country", "props"]
    assert [r[0] for r in table[1:]] == [site.ids[k] for k in (9, 4, 2, 1, 8, 3, 6, 5, 7)]
    signup = table[2]
    assert signup == [site.ids[4], iso(site.ts[4]), "signup", "https://example.test/pricing", "/pricing", "",
                      "Title /pricing", "1280", f"s1-{site.site_id}", "US", '{"plan":"pro"}']


async def test_export_json_and_limits(client, site):
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "format": "json"})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["Content-Disposition"] == f'attachment; filename="tally-{site.site_id}-7d.json"'
    rows = orjson.loads(await resp.read())
    assert [r["id"] for r in rows] == [site.ids[k] for k in NEWEST_FIRST_7D]
    assert rows[1]["props"] == {"plan": "pro"} and rows[1]["sessionId"] == f"s1-{site.site_id}"
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "format": "json", "limit": "2"})
    assert [r["id"] for r in orjson.loads(await resp.read())] == [site.ids[9], site.ids[4]]
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "limit": "60000"})
    assert resp.status == 200 and resp.headers["X-Export-Limit"] == "50000"
    assert len(list(csv.reader(io.StringIO(await resp.text())))) == 1 + 8
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "format": "xml"})
    assert resp.status == 400 and (await resp.json())["error"] == "invalid format"


async def test_export_takes_the_event_logs_event_name(client, site):
    """The event log filtered by a name exports what it lists, not every event of the range."""
    params = {"siteId": site.site_id, "range": "90d", "eventName": "signup"}
    listed = await (await client.get("/api/analytics/events", params=params)).json()
    resp = await client.get("/api/analytics/export", params={**params, "format": "json"})
    assert resp.status == 200
    rows = orjson.loads(await resp.read())
    assert [r["id"] for r in rows] == [e["id"] for e in listed["events"]] == [site.ids[4]]


async def test_export_takes_the_overviews_filters(client, site, monkeypatch):
    """The overview's filters narrow its export as they narrow its numbers: the spec's path/referrer/country
    parameters and `filter=` terms of any dimension, paged newest first (pages of two here)."""
    from app.views import analytics_events

    monkeypatch.setattr(analytics_events, "EXPORT_PAGE", 2)

    async def exported(**params: str | list) -> list[str]:
        resp = await client.get("/api/analytics/export", params=[
            ("siteId", site.site_id), ("range", "90d"), ("format", "json"),
            *((k, x) for k, v in params.items() for x in (v if isinstance(v, list) else [v]))])
        assert resp.status == 200, await resp.text()
        return [r["id"] for r in orjson.loads(await resp.read())]

    ids = site.ids
    assert await exported(country="US", filter="page==/") == [ids[1], ids[8], ids[6]]
    assert await exported(eventName="pageview", filter="country==US") == [ids[k] for k in (9, 2, 1, 6)]
    assert await exported(eventName="pageview", filter="country==US", limit="3") == [ids[k] for k in (9, 2, 1)]
    assert await exported(filter=["event!=pageview", "country!=DE"]) == [ids[4], ids[8]]
    assert await exported(path="blog") == [ids[5]]
    assert await exported(filter="browser==Lynx") == []
    resp = await client.get("/api/analytics/export", params={"siteId": site.site_id, "filter": "shoe==1"})
    assert resp.status == 400 and (await resp.json())["error"] == "invalid filter"


async def test_a_filtered_export_asks_the_store_for_many_pages_of_keys_at_once(client, site, monkeypatch):
    """Each ask reads the whole filtered window (0.3-0.8 s at 90 days of 9M events): asked once per page of
    500 rows, a 50,000-row export took 31-80 s. Here pages of two rows, keys asked five at a time."""
    from app.views import analytics_events
    from storage import analytics_lists

    monkeypatch.setattr(analytics_events, "EXPORT_PAGE", 2)
    monkeypatch.setattr(analytics_events, "EXPORT_KEYS", 5)
    asked: list[int] = []
    matching = analytics_lists.matching_event_keys

    async def counted(*args, **kwargs):
        keys = await matching(*args, **kwargs)
        asked.append(len(keys))
        return keys

    monkeypatch.setattr(analytics_lists, "matching_event_keys", counted)
    params = {"siteId": site.site_id, "range": "90d", "format": "json", "filter": "event!=nothing"}
    exported = orjson.loads(await (await client.get("/api/analytics/export", params=params)).read())
    everything = await (await client.get("/api/analytics/events", params={**params, "limit": "100"})).json()
    assert [r["id"] for r in exported] == [e["id"] for e in everything["events"]]
    assert len(everything["events"]) == 9 and asked[:2] == [5, 4]  # then the log's own ask
    resp = await client.get("/api/analytics/export", params={**params, "limit": "3"})
    assert [r["id"] for r in orjson.loads(await resp.read())] == [e["id"] for e in everything["events"][:3]]
    assert asked[3:] == [3]


async def test_export_of_empty_window_is_header_or_empty_array(client, site, database_url, workspace):
    conn = await asyncpg.connect(database_url)
    try:
        empty_site, _, _ = await create_site(conn, workspace)
    finally:
        await conn.close()
    resp = await client.get("/api/analytics/export", params={"siteId": empty_site})
    assert (await resp.text()).splitlines() == ["id,createdAt,name,url,path,referrer,title,viewportW,sessionId,"
                                                "country,props"]
    resp = await client.get("/api/analytics/export", params={"siteId": empty_site, "format": "json"})
    assert orjson.loads(await resp.read()) == []


@pytest.mark.parametrize("route", ROUTES)
async def test_requires_session(client, route):
    resp = await client.get(f"/api/analytics/{route}", params={"siteId": "whatever"})
    assert resp.status == 401
    assert await resp.json() == {"error": "unauthorized"}


@pytest.mark.parametrize("route", ROUTES)
async def test_parameter_errors(client, site, route):
    resp = await client.get(f"/api/analytics/{route}")
    assert resp.status == 400 and await resp.json() == {"error": "missing siteId"}
    resp = await client.get(f"/api/analytics/{route}", params={"siteId": site.site_id, "range": "2d"})
    assert resp.status == 400 and (await resp.json())["error"] == "invalid range"
    for name in ("siteId", "path", "eventName"):
        resp = await client.get(f"/api/analytics/{route}", params={"siteId": site.site_id, name: "a\x00b"})
        assert resp.status == 400 and await resp.json() == {"error": f"invalid {name}"}


@pytest.mark.parametrize("route", ROUTES)
async def test_other_workspace_site_is_not_found(client, site, database_url, route):
    other = await load_fixture(database_url, f"{site.site_id}-other")
    for site_id in (other.site_id, "no-such-site"):
        resp = await client.get(f"/api/analytics/{route}", params={"siteId": site_id})
        assert resp.status == 404
        assert await resp.json() == {"error": "not found"}


async def test_workspaces_see_only_their_own_numbers(client, site, database_url, login):
    other = await load_fixture(database_url, f"{site.site_id}-other")
    body = await (await client.get("/api/analytics/overview", params={"siteId": site.site_id})).json()
    assert body["totalEvents"] == 8 and body["uniqueVisitors"] == 4
    await client.post("/api/auth/logout")
    await login(workspace_name=f"{site.site_id}-other")
    resp = await client.get("/api/analytics/overview", params={"siteId": site.site_id})
    assert resp.status == 404
    body = await (await client.get("/api/analytics/overview", params={"siteId": other.site_id})).json()
    assert body["totalEvents"] == 8


# --- CSV formula injection (issue 10, item 6) ----------------------------------------------------------

async def _raw_exchange(client, method: str, target: str) -> tuple[bytes, bytes]:
    """One request over a bare socket with the client's session cookie: the head and the body bytes as sent, to
    see what aiohttp's client would hide (chunk framing, a body after a HEAD)."""
    cookie = "; ".join(f"{c.key}={c.value}" for c in client.session.cookie_jar)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(f"{method} {target} HTTP/1.1\r\nHost: tally\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
                 .encode())
    raw = await reader.read()  # until the server closes the connection
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return head, body


async def _site_with_events(database_url: str, workspace: str, events: list[tuple]) -> str:
    """A new site of the workspace holding these events (tests.analytics_support.insert_events rows)."""
    from tests.analytics_support import insert_events

    conn = await asyncpg.connect(database_url)
    try:
        await init_connection(conn)
        site_id, _, ws = await create_site(conn, workspace)
        await insert_events(conn, site_id, ws, events)
    finally:
        await conn.close()
    return site_id


async def test_export_csv_neutralises_formulas_in_visitor_values(client, database_url, workspace, login):
    from datetime import UTC, datetime

    await login()
    now = datetime.now(UTC)
    site_id = await _site_with_events(database_url, workspace, [
        ("evt_formula1", "=HYPERLINK(\"http://evil.example\",\"x\")", "+1+2", "-2+3", "US", "ip", "@SUM(A1)",
         now, {"k": "=1"}),
        ("evt_formula0", "\tcmd", "\r=1", "plain, text", "DE", "ip", "s-ok", now, None),
    ])
    resp = await client.get("/api/analytics/export", params={"siteId": site_id})
    assert resp.status == 200
    text = await resp.text()
    table = list(csv.reader(io.StringIO(text)))
    by_id = {row[0]: dict(zip(table[0], row, strict=True)) for row in table[1:]}
    first = by_id["evt_formula1"]
    assert first["name"] == "'=HYPERLINK(\"http://evil.example\",\"x\")"
    assert first["path"] == "'+1+2" and first["referrer"] == "'-2+3" and first["sessionId"] == "'@SUM(A1)"
    assert first["title"] == "Title +1+2"  # not at the start: unchanged
    assert first["props"] == '{"k":"=1"}'
    second = by_id["evt_formula0"]
    assert second["name"] == "'\tcmd" and second["path"] == "'\r=1" and second["referrer"] == "plain, text"
    # Neutralised cells stay quoted in the file itself.
    assert '"\'=HYPERLINK(""http://evil.example"",""x"")"' in text and '"\'+1+2"' in text and '"\'@SUM(A1)"' in text
    assert '"\'-2+3"' in text and '"\'\tcmd"' in text
    # Other text is written as before.
    assert text.splitlines()[0] == "id,createdAt,name,url,path,referrer,title,viewportW,sessionId,country,props"


async def test_export_csv_props_are_json_text_of_any_type(client, database_url, workspace, login):
    """The props column is the props' compact JSON text whatever their type (the spec takes any JSON), so a
    reader parses every cell alike: a string prop was written bare, the string "3.5" read as the number 3.5
    and the string "=1+1" as a formula to defuse."""
    from datetime import UTC, datetime, timedelta

    await login()
    values = [{"plan": "pro"}, [1, "a"], "3.5", 3.5, -2, True, "=1+1", "x, \"y\""]
    now = datetime.now(UTC)
    site_id = await _site_with_events(database_url, workspace, [
        (f"evt_props{i}", "custom", "/", None, "US", "ip", "s", now - timedelta(seconds=i), value)
        for i, value in enumerate(values)])
    resp = await client.get("/api/analytics/export", params={"siteId": site_id})
    table = list(csv.reader(io.StringIO(await resp.text())))
    cells = {row[0]: row[-1] for row in table[1:]}
    assert [orjson.loads(cells[f"evt_props{i}"]) for i in range(len(values))] == values
    assert cells["evt_props2"] == '"3.5"' and cells["evt_props3"] == "3.5" and cells["evt_props6"] == '"=1+1"'


async def test_export_serves_props_integers_beyond_64_bits(client, database_url, workspace, login):
    """Ingestion stores any JSON integer in props (as on /v1) and the event log serves it back, but both
    export formats failed on it mid-stream: one such event from any page cut every export of its site to
    nothing (a 200 whose chunked body broke off before its first byte)."""
    from tests.site_helpers import post_event, register_site

    await login()
    site_id, _ = await register_site(database_url, workspace)
    big = 123456789012345678901234567890
    body = b'{"s":"%s","n":"order","props":{"n":%d,"tags":[%d]}}' % (site_id.encode(), big, -big)
    assert (await post_event(client, body)).status == 202
    resp = await client.get("/api/analytics/export", params={"siteId": site_id})
    assert resp.status == 200
    table = list(csv.reader(io.StringIO(await resp.text())))
    assert [row[2] for row in table[1:]] == ["order"]
    assert table[1][-1] == f'{{"n":{big},"tags":[{-big}]}}'
    resp = await client.get("/api/analytics/export", params={"siteId": site_id, "format": "json"})
    assert resp.status == 200
    text = await resp.text()
    assert f'"props":{{"n":{big},"tags":[{-big}]}}' in text and text.endswith("}]")


async def test_export_failing_mid_stream_is_cut_off_not_an_error_page_in_the_file(client, database_url, workspace,
                                                                                  login, monkeypatch):
    """Once the 200 and the first rows are sent, a failing page query can only cut the download short (the
    client sees an incomplete chunked body). It wrote a whole `HTTP/1.1 500` answer into the file's
    bytes instead, which broke the chunk framing, and a keep-alive client waited on it for minutes."""
    from storage import analytics_events as store
    from tests.site_helpers import post_event, register_site

    await login()
    site_id, _ = await register_site(database_url, workspace)
    for i in range(3):
        assert (await post_event(client, {"s": site_id, "n": f"e{i}"})).status == 202
    real, pages = store.export_page, []

    async def second_page_fails(conn, *args):
        pages.append(args)
        if len(pages) > 1:
            raise asyncpg.PostgresError("connection lost")
        return await real(conn, *args)

    monkeypatch.setattr(store, "export_page", second_page_fails)
    monkeypatch.setattr("app.views.analytics_events.EXPORT_PAGE", 2)
    head, body = await _raw_exchange(client, "GET", f"/api/analytics/export?siteId={site_id}&range=1h")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Transfer-Encoding: chunked" in head
    assert len(pages) == 2 and b",e2," in body and b",e1," in body  # the first page was sent
    assert b"HTTP/1.1" not in body and b"internal error" not in body
    assert not body.endswith(b"0\r\n\r\n")  # no last chunk: the client knows the file is incomplete


async def test_head_on_export_answers_what_get_would_without_running_it(client, database_url, workspace, login):
    """aiohttp routes HEAD to the GET handler: HEAD ran the whole export and wrote its rows onto the connection
    after the headers, where a keep-alive client reads them as the start of its next answer. HEAD answers GET's
    status and headers (401, 400 and 404 alike) and reads no event: tally_exported_events_total stays put."""
    from tests.conftest import metric
    from tests.site_helpers import post_event, register_site

    await login()
    site_id, _ = await register_site(database_url, workspace)
    for i in range(3):
        assert (await post_event(client, {"s": site_id, "n": f"e{i}"})).status == 202

    async def exported() -> float:
        return metric(await (await client.get("/metrics")).text(), "tally_exported_events_total", format="csv")

    before = await exported()
    head, body = await _raw_exchange(client, "HEAD", f"/api/analytics/export?siteId={site_id}&range=1h")
    assert head.startswith(b"HTTP/1.1 200 ") and body == b""
    assert f'filename="tally-{site_id}-1h.csv"'.encode() in head
    assert await exported() == before

    params = {"siteId": site_id, "range": "1h", "format": "json", "limit": "2"}
    probe, get = await client.head("/api/analytics/export", params=params), await client.get(
        "/api/analytics/export", params=params)
    assert probe.status == get.status == 200 and len(orjson.loads(await get.read())) == 2
    shown = ("Content-Type", "Content-Disposition", "Cache-Control", "X-Export-Limit")
    assert [probe.headers[h] for h in shown] == [get.headers[h] for h in shown]
    assert await exported() == before  # a JSON export counts under its own format
    get = await client.get("/api/analytics/export", params={"siteId": site_id, "range": "1h"})
    assert len((await get.text()).splitlines()) == 1 + 3 and await exported() == before + 3

    for bad in ({}, {"siteId": site_id, "format": "xml"}, {"siteId": site_id, "limit": "0"}, {"siteId": "no-such"}):
        probe, get = await client.head("/api/analytics/export", params=bad), await client.get(
            "/api/analytics/export", params=bad)
        assert probe.status == get.status and probe.status in (400, 404), bad
    await client.post("/api/auth/logout")
    assert (await client.head("/api/analytics/export", params={"siteId": site_id})).status == 401
