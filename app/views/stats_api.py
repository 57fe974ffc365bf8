"""POST /api/v2/query: Plausible's Stats API (v2) on Tally's site analytics, so that the scripts, sheets,
dashboards and assistants written against Plausible's API read a Tally site unchanged but for the base URL
and the key (the legacy v1 is app/views/stats_api_v1.py, on the same reads). The key is a Tally API key with
the read scope, rate-limited as the keyed API's reads; the site is named by its domain (or Tally's id) and
must be of the key's workspace. The query is read by app/views/stats_query.py; the numbers are the
dashboard's own (overview totals, breakdowns, time buckets of the site's zone). Answers
{"results": [{"metrics": [...], "dimensions": [...]}], "meta": {}, "query": {...}}.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import timedelta
from zoneinfo import ZoneInfo

import asyncpg
import orjson
from aiohttp import web

from app.appkeys import POOL
from app.auth import RATE_HEADERS, Handler, admit, bearer_keyed
from app.bodies import decode_site_json, read_site_body
from app.input_rules import query_int
from app.keys import KeyInfo
from app.responses import ApiError, SiteError, json_response
from app.views.analytics import breakdown_rows, shifted
from app.views.analytics_params import (
    ALL,
    MAX_POINTS,
    Site,
    Window,
    analytics_store,
    filter_errors,
    first_day,
    with_goals,
)
from app.views.stats_query import MAX_LIMIT, StatsQuery, parse, window
from storage import analytics as store
from storage import analytics_lists
from storage import sites as site_store
from storage.analytics_breakdown import TIME_BUCKETS
from storage.clickhouse import AnalyticsStore

BODY_LIMIT = 64 * 1024
KEY: web.RequestKey[KeyInfo] = web.RequestKey("stats_key", KeyInfo)
# Metrics a breakdown row holds as Tally computes them, and those derived here from them.
DERIVED = {"views_per_visit": ("pageviews", "visits"), "percentage": ("visitors",)}


@dataclass(frozen=True, slots=True)
class Answer:
    site: Site
    window: Window
    time: str | None  # the time dimension's TIME_BUCKETS key, if any
    results: list[tuple[list[str], list]]  # (dimension values, metric values), in the query's orders
    previous: list | None = None  # the aggregate's metrics over the period before (compare)


def keyed(handler: Handler) -> Handler:
    """A Stats API handler: authenticated by a Tally key with the read scope (admit, its errors in the site API's
    shape, which is Plausible's {"error": "..."}), the rate limit's headers on every answer."""

    @bearer_keyed
    @functools.wraps(handler)
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            request[KEY] = await admit(request, ("read",), "query")
            response = await handler(request)
        except ApiError as exc:
            raise SiteError(exc.status, exc.message, headers=request.get(RATE_HEADERS, {})) from None
        except SiteError as exc:
            exc.headers.update(request[RATE_HEADERS])
            raise
        response.headers.update(request[RATE_HEADERS])
        return response

    return run


async def answer(request: web.Request, q: StatsQuery, *, compare: bool = False) -> Answer:
    """The query's rows on its site's days (the site a 404 unless of the key's workspace), and with `compare` the
    aggregate of as many days just before."""
    key = request[KEY]
    async with request.config_dict[POOL].acquire() as conn:
        row = await keyed_site(conn, request, q.site)
        since = await first_day(conn, row["id"], row["time_zone"]) if getattr(q.asked, "name", None) == ALL else None
    site = Site(row["id"], row["domain"], row["time_zone"])
    w = window(q.asked, site.time_zone, since)
    filters, goals = await with_goals(request, site, store.Filters(extra=q.filters),
                                      needed="goal" in q.dimensions)
    props = tuple(auto_time(w) if d is None else d for d in q.dimensions)
    time = next((p for p in props if p in TIME_BUCKETS), None)
    if time == "time:hour" and (w.end - w.start) / timedelta(hours=1) > MAX_POINTS:
        raise SiteError(400, f"time:hour covers at most {MAX_POINTS} hours: narrow the dates or take days")
    db = await analytics_store(request, key.workspace_id)
    with filter_errors():
        if props:
            return Answer(site, w, time, await _rows(db, site, w, props, filters, goals, q))
        before = shifted(w, "previous_period") if compare else None
        values, *previous = await asyncio.gather(*(_aggregate(db, site, period, filters, q.metrics)
                                                   for period in (w, before) if period is not None))
        return Answer(site, w, None, [([], values)], previous[0] if previous else None)


async def keyed_site(conn: asyncpg.Connection, request: web.Request, name: str) -> asyncpg.Record:
    """The key's workspace's site named by its domain (or Tally's id): id, domain, time_zone; else a 404."""
    row = await site_store.site_by_name(conn, request[KEY].workspace_id, name)
    if row is None:
        raise SiteError(404, "site not found: name a site of this key's workspace by its domain")
    return row


@keyed
async def query(request: web.Request) -> web.Response:
    """POST /api/v2/query."""
    q = parse(decode_site_json(await read_site_body(request, BODY_LIMIT)))
    found = await answer(request, q)
    w, zone = found.window, ZoneInfo(found.site.time_zone)
    asked = {**q.echo, "site_id": found.site.domain, "date_range": [
        w.start.astimezone(zone).isoformat(), (w.end - timedelta(seconds=1)).astimezone(zone).isoformat()]}
    return json_response({
        "results": [{"metrics": values, "dimensions": dims} for dims, values in found.results],
        "meta": {"time_labels": time_labels(w, found.time)} if q.time_labels else {}, "query": asked})


async def _aggregate(db: AnalyticsStore, site: Site, w: Window, filters: store.Filters, metrics: list[str]) -> list:
    """The overview's numbers under the filters, in Plausible's units."""
    reads = [store.totals(db, site.id, w.start, w.end, filters), store.session_stats(db, site.id, w.start, w.end,
                                                                                     filters)]
    if "conversion_rate" in metrics:  # converting visitors over all visitors under the other filters
        reads.append(store.totals(db, site.id, w.start, w.end, filters.without_goals()))
    totals, visits, *everyone = await asyncio.gather(*reads)
    values = {"visitors": totals.visitors, "pageviews": totals.pageviews, "events": totals.events,
              "visits": visits.sessions, "visit_duration": round(visits.avg_ms / 1000),
              "bounce_rate": _share(visits.bounces, visits.sessions),
              "views_per_visit": round(totals.pageviews / visits.sessions, 2) if visits.sessions else 0.0}
    if everyone:
        values["conversion_rate"] = _share(totals.visitors, everyone[0].visitors)
    return [values[m] for m in metrics]


async def _rows(db: AnalyticsStore, site: Site, w: Window, props: tuple[str, ...], filters: store.Filters,
                goals: list[store.Goal], q: StatsQuery) -> list[tuple[list[str], list]]:
    """Rows of the dimensions' values, ordered and paged as asked. The breakdown's own order (visitors, then
    the key) is paged by the store; any other order sorts the first MAX_LIMIT rows by visitors, so dimensions
    of more values than that are ordered within those."""
    wanted = [m for m in q.metrics if m not in DERIVED]
    for m in q.metrics:
        wanted += [d for d in DERIVED.get(m, ()) if d not in wanted]
    by_visitors = q.order == [("visitors", True)] and not q.time
    limit, offset = (q.limit, q.offset) if by_visitors else (MAX_LIMIT, 0)
    reads = [breakdown_rows(db, site, w, prop=props[0] if len(props) == 1 else props, filters=filters,
                            goals=goals, metrics=wanted or ["visitors"], limit=limit, offset=offset)]
    if "percentage" in q.metrics:
        reads.append(store.totals(db, site.id, w.start, w.end, filters))
    rows, *totals = await asyncio.gather(*reads)
    names = q.echo["dimensions"]
    for r in rows:
        r["visit_duration"] = round(r.get("visit_duration", 0) / 1000)  # the breakdown's milliseconds
        r["views_per_visit"] = round(r.get("pageviews", 0) / r["visits"], 2) if r.get("visits") else 0.0
        if totals:
            r["percentage"] = _share(r["visitors"], totals[0].visitors)
        values = orjson.loads(r["key"]) if len(props) > 1 else [r["key"]]  # a JSON array of the keys
        for name, prop, value in zip(names, props, values, strict=True):
            days = prop in TIME_BUCKETS and prop != "time:hour"  # a day's, week's or month's first day
            r[name] = value[:10] if days else value
    if not by_visitors:
        rows = _ordered(rows, q.order)[q.offset:q.offset + q.limit]
    return [([r[n] for n in names], [r.get(m) for m in q.metrics]) for r in rows]


def _ordered(rows: list[dict], order: list[tuple[str, bool]]) -> list[dict]:
    """Rows sorted by each (name, descending) in turn, the first deciding; a null (a page without engagement)
    last either way."""
    for name, descending in reversed(order):  # stable sorts: the last pass, the first name, decides
        present = sorted((r for r in rows if r.get(name) is not None), key=lambda r, n=name: r[n],
                         reverse=descending)
        rows = present + [r for r in rows if r.get(name) is None]
    return rows


def auto_time(w: Window) -> str:
    """The bucket of the `time` dimension, as Plausible picks it: hours for one day, months for a range that
    reaches into a month after its first day's date, else days."""
    first, last = w.days or (w.start.date(), w.start.date())
    months = (last.year - first.year) * 12 + last.month - first.month - (last.day < first.day)
    return "time:hour" if w.unit == "hour" else "time:month" if months > 0 else "time:day"


def time_labels(w: Window, prop: str | None) -> list[str]:
    """Every bucket of the window, as a time dimension names them (include.time_labels)."""
    if prop in ("time:week", "time:month") and w.days:
        first, last = w.days
        days = (first + timedelta(days=i) for i in range((last - first).days + 1))
        starts = {d - timedelta(days=d.weekday()) if prop == "time:week" else d.replace(day=1) for d in days}
        return [str(d) for d in sorted(starts)]
    interval = "hour" if prop == "time:hour" else "day"
    first, last = w.buckets(interval)
    zone = ZoneInfo(w.time_zone)
    points = analytics_lists.filled({}, interval=interval, first=first, last=last, time_zone=w.time_zone)
    fmt = "%Y-%m-%d %H:%M:%S" if interval == "hour" else "%Y-%m-%d"
    return [at.astimezone(zone).strftime(fmt) for at, _ in points]


def whole_number(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    """A whole-number query parameter of the Stats and Sites APIs' GET reads, else a 400 naming its range."""
    try:
        return query_int(request.query.get(name), default, lo, hi)
    except ValueError:
        raise SiteError(400, f"invalid {name}: {lo} to {hi}") from None


def _share(part: int, whole: int) -> float:
    return round(100 * part / whole, 2) if whole else 0.0


def setup_stats_api_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v2/query", query)
