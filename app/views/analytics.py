"""GET /api/analytics/overview, /timeseries, /top-*, /breakdown, /has-values and /property-keys: dashboard reads of
one site, with `filter=` terms on every one and `compare=` on the overview and the time series.

Every handler checks the session (401), then its parameters (400), then that the site belongs to the
caller's workspace (404), and only then queries.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from aiohttp import web

from app.appkeys import WARMER
from app.responses import SiteError, iso_ms, json_response
from app.shared_access import shareable
from app.views import analytics_events
from app.views.analytics_params import (
    Site,
    Window,
    analytics_store,
    base_params,
    count_param,
    days_later,
    filter_errors,
    filters_param,
    interval_param,
    offset_param,
    resolve_site,
    site_and_filters,
    with_goals,
)
from storage import analytics as store
from storage import analytics_breakdown, analytics_engagement, analytics_lists, analytics_overview
from storage.clickhouse import AnalyticsStore
from storage.site_filters import BREAKDOWN_PROPERTIES, ENGAGEMENT_METRICS, EVENT_PROPERTIES, METRICS, PROPS_PREFIX

TOP_DEFAULT, TOP_MAX = 20, 100
_LABELS = {"minute": "%H:%M", "hour": "%b %d %H:00", "day": "%b %d"}
_DIMS = {"top-pages": "p", "top-referrers": "r", "top-countries": "c"}


def point(bucket: datetime, value: int, interval: str, time_zone: str = "UTC") -> dict:
    """A series point: its bucket's start as an instant, labelled by the site's clock."""
    label = bucket.astimezone(ZoneInfo(time_zone)).strftime(_LABELS[interval])
    return {"timestamp": iso_ms(bucket), "value": value, "label": label}


def top_rows(rows: list[tuple[str, int]], total: int) -> list[dict]:
    return [{"key": key, "count": count, "percentage": round(100 * count / total, 2) if total else 0.0}
            for key, count in rows]


async def _series(db: AnalyticsStore, site_id: str, window: Window, interval: str, name: str,
                  filters: store.Filters) -> list[dict]:
    first, last = window.buckets(interval)
    with filter_errors():
        points = await analytics_lists.series(db, site_id, window.start, window.end, name=name, interval=interval,
                                              first=first, last=last, filters=filters, time_zone=window.time_zone)
    return [point(bucket, value, interval, window.time_zone) for bucket, value in points]


def headline(totals: store.Totals, sessions: store.SessionStats) -> dict:
    return {
        "totalEvents": totals.events,
        "totalPageviews": totals.pageviews,
        "uniqueVisitors": totals.visitors,
        "sessions": sessions.sessions,
        "bounceRate": round(100 * sessions.bounces / sessions.sessions, 2) if sessions.sessions else 0.0,
        "avgSessionDuration": round(sessions.avg_ms),
    }


async def _headline(db: AnalyticsStore, site: Site, start: datetime, end: datetime, filters: store.Filters) -> dict:
    with filter_errors():  # side by side on the store's read clients
        totals, sessions = await asyncio.gather(store.totals(db, site.id, start, end, filters),
                                                store.session_stats(db, site.id, start, end, filters))
    return headline(totals, sessions)


async def overview_body(db: AnalyticsStore, site: Site, w: Window, filters: store.Filters) -> dict:
    """The overview of a site."""
    first, last = w.buckets(w.unit)
    with filter_errors():
        totals, sessions, tops, points = await analytics_overview.overview(
            db, site.id, w.start, w.end, name=filters.counted(), interval=w.unit, first=first, last=last,
            domain=site.domain, limit=TOP_DEFAULT, filters=filters, time_zone=w.time_zone)
    return {
        **headline(totals, sessions),
        "topPages": top_rows(*tops["p"]),
        "topReferrers": top_rows(*tops["r"]),
        "topCountries": top_rows(*tops["c"]),
        "timeSeries": [point(bucket, value, w.unit, w.time_zone) for bucket, value in points],
        "range": w.range,
        "interval": w.unit,
        "timezone": w.time_zone,
        **({"from": w.days[0].isoformat(), "to": w.days[1].isoformat()} if w.days else {}),
    }


# --- comparison (issue 12) ----------------------------------------------------------------------------

COMPARE = ("previous_period", "year_over_year")


def compare_param(request: web.Request) -> str | None:
    value = request.query.get("compare") or None
    if value is not None and value not in COMPARE:
        raise SiteError(400, "invalid compare", allowed=list(COMPARE))
    return value


def shifted(w: Window, mode: str) -> Window:
    """The window compared with: the one just before (as many buckets), or the same dates a year earlier.
    Windows of days (and a period or custom range of one day) move by the site's calendar days, so they stay
    from one local midnight to the next."""
    if mode == "previous_period" and w.unit != "day" and w.days is None:
        delta = w.end - w.start
        return Window(w.range, w.start - delta, w.end - delta, w.unit, w.time_zone)
    if mode == "previous_period":
        days = round((w.end - w.start) / timedelta(days=1))
    else:
        days = 366 if _crosses_leap_day(w.start) else 365
    return Window(w.range, days_later(w.start, -days, w.time_zone), days_later(w.end, -days, w.time_zone), w.unit,
                  w.time_zone)


def _crosses_leap_day(moment: datetime) -> bool:
    try:
        return moment.replace(year=moment.year - 1) != moment - timedelta(days=365)
    except ValueError:  # 29 February
        return True


def change(current: float, previous: float, *, points: bool = False) -> float | None:
    """Percent change (null when the comparison is 0); for rates the difference in percentage points."""
    if points:
        return round(current - previous, 2)
    return None if previous == 0 else round(100 * (current - previous) / previous, 1)


def bounce_rate_change(current: float, previous: float, visits: tuple[int, int]) -> float | None:
    """A bounce rate's change in percentage points; null when either period has no visits (no rate to move
    from or to)."""
    return change(current, previous, points=True) if all(visits) else None


async def overview(request: web.Request) -> web.Response:
    base = await base_params(request)
    mode = compare_param(request)
    site, filters = await site_and_filters(request, base)
    db = await analytics_store(request, base.workspace_id)
    body = await overview_body(db, site, base.window, filters)
    if not filters.terms():
        request.config_dict[WARMER].seen(site.id, base.window.range)
    if mode:
        prev = shifted(base.window, mode)
        before = await _headline(db, site, prev.start, prev.end, filters)
        body["comparison"] = {**before, "from": iso_ms(prev.start), "to": iso_ms(prev.end), "mode": mode}
        body["change"] = {k: change(body[k], before[k]) for k in before}
        body["change"]["bounceRate"] = bounce_rate_change(body["bounceRate"], before["bounceRate"],
                                                          (body["sessions"], before["sessions"]))
    return json_response(body)


async def timeseries(request: web.Request) -> web.Response:
    base = await base_params(request)
    interval = interval_param(request, base.window)
    mode = compare_param(request)
    site, filters = await site_and_filters(request, base)
    name = filters.counted()
    db = await analytics_store(request, base.workspace_id)
    data = await _series(db, site.id, base.window, interval, name, filters)
    body: dict = {"data": data, "interval": interval, "eventName": name, "timezone": base.window.time_zone}
    if mode:
        prev = shifted(base.window, mode)
        before = await _series(db, site.id, prev, interval, name, filters)
        body["comparison"] = before
        body["change"] = change(sum(p["value"] for p in data), sum(p["value"] for p in before))
    return json_response(body)


async def _top_list(request: web.Request, dim: str) -> web.Response:
    base = await base_params(request)
    limit = count_param(request, "limit", TOP_DEFAULT, TOP_MAX)
    offset = offset_param(request)
    site, filters = await site_and_filters(request, base)
    name = filters.counted()
    w = base.window
    with filter_errors():
        db = await analytics_store(request, base.workspace_id)
        rows, total = await analytics_lists.top(db, site.id, w.start, w.end, dim=dim, name=name, domain=site.domain,
                                                limit=limit, filters=filters, offset=offset)
    return json_response({"data": top_rows(rows, total), "total": total})


def _top_handler(dim: str):
    async def top_list(request: web.Request) -> web.Response:
        return await _top_list(request, dim)

    return top_list


# --- breakdown (issue 12) -----------------------------------------------------------------------------

BREAKDOWN_DEFAULT, BREAKDOWN_MAX = 20, 1000


async def breakdown(request: web.Request) -> web.Response:
    """GET /api/analytics/breakdown?siteId&range&property&metrics&limit&offset&filter=…"""
    base = await base_params(request)
    prop = request.query.get("property") or ""
    if prop not in BREAKDOWN_PROPERTIES and not (prop.startswith(PROPS_PREFIX) and len(prop) > 6):
        raise SiteError(400, "invalid property", allowed=[*BREAKDOWN_PROPERTIES, "props:<key>"])
    metrics = [m for m in (request.query.get("metrics") or "visitors").split(",") if m]
    if not metrics or any(m not in METRICS + ENGAGEMENT_METRICS for m in metrics):
        raise SiteError(400, "invalid metrics", allowed=list(METRICS + ENGAGEMENT_METRICS))
    engagement = [m for m in metrics if m in ENGAGEMENT_METRICS]
    if engagement and prop != "page":
        raise SiteError(400, f"{engagement[0]} needs property=page")
    counted = [m for m in metrics if m not in ENGAGEMENT_METRICS] or ["visitors"]
    limit = count_param(request, "limit", BREAKDOWN_DEFAULT, BREAKDOWN_MAX)
    offset = offset_param(request)
    filters = filters_param(request)
    site = await resolve_site(request, base)
    goal_filtered = any(f.dimension == "goal" for f in filters.extra)
    if "conversion_rate" in metrics and prop != "goal" and not goal_filtered:
        raise SiteError(400, "conversion_rate needs property=goal or a goal filter")
    filters, goals = await with_goals(request, site, filters, needed=prop == "goal")
    db = await analytics_store(request, base.workspace_id)
    w = base.window
    rows = await breakdown_rows(db, site, w, prop=prop, filters=filters, goals=goals, metrics=metrics,
                                limit=limit, offset=offset)
    if analytics_breakdown.from_window_states(prop, filters, counted):
        request.config_dict[WARMER].seen(site.id, w.range, prop)  # a read whose rows are kept by the day
    data = [{"key": r["key"], **{m: r.get(m) for m in metrics}} for r in rows]
    return json_response({"data": data, "property": prop, "metrics": metrics, "limit": limit, "offset": offset})


async def breakdown_rows(db: AnalyticsStore, site: Site, w: Window, *, prop: str | tuple[str, ...],
                         filters: store.Filters, goals: list[store.Goal], metrics: list[str], limit: int,
                         offset: int) -> list[dict]:
    """A breakdown's rows with every metric asked for: the counted ones, each key's conversion rate (its
    converting visitors over all its visitors) and a page's engagement. Buckets of time are the site's."""
    counted = [m for m in metrics if m not in ENGAGEMENT_METRICS] or ["visitors"]
    with filter_errors():
        reads = [analytics_breakdown.breakdown(db, site.id, w.start, w.end, prop=prop, filters=filters, goals=goals,
                                               limit=limit, offset=offset, metrics=counted, domain=site.domain,
                                               time_zone=w.time_zone)]
        if "conversion_rate" in metrics and prop != "goal":
            # Converting visitors of each key over all its visitors (the same filters but the goal's), read
            # beside the rows on the store's read clients.
            reads.append(analytics_breakdown.breakdown(
                db, site.id, w.start, w.end, prop=prop, filters=filters.without_goals(), goals=goals,
                limit=max(BREAKDOWN_MAX, limit), offset=0, metrics=("visitors",), domain=site.domain,
                time_zone=w.time_zone))
        rows, *base = await asyncio.gather(*reads)
        if base:
            everyone = {r["key"]: r["visitors"] for r in base[0]}
            for r in rows:
                total = everyone.get(r["key"], 0)
                r["conversion_rate"] = round(100 * r["visitors"] / total, 2) if total else 0.0
        if any(m in ENGAGEMENT_METRICS for m in metrics):
            await with_engagement(db, site.id, w, filters, rows)
    return rows


async def with_engagement(db: AnalyticsStore, site_id: str, w: Window, filters: store.Filters,
                           rows: list[dict]) -> None:
    """Each page row's scroll depth and time on page (None without engagement events, or under an event or
    goal filter: storage/analytics_engagement.py)."""
    pages = await analytics_engagement.page_engagement(db, site_id, w.start, w.end, filters, [r["key"] for r in rows]) \
        if analytics_engagement.applies(filters) else {}
    for r in rows:
        seen = pages.get(r["key"])
        r["scroll_depth"], r["time_on_page"] = (seen.scroll_depth, seen.time_on_page) if seen else (None, None)


async def has_values(request: web.Request) -> web.Response:
    """GET /api/analytics/has-values?siteId&range&properties=region,city&filter=…: {"data": {property: bool}},
    whether a breakdown by each property would have rows, without computing it: the dashboard shows its
    Regions and Cities tabs by it (they have values only with a GeoIP City database)."""
    base = await base_params(request)
    props = list(dict.fromkeys(p for p in (request.query.get("properties") or "").split(",") if p))
    if not props or any(p not in EVENT_PROPERTIES for p in props):
        raise SiteError(400, "invalid properties", allowed=list(EVENT_PROPERTIES))
    site, filters = await site_and_filters(request, base)
    w = base.window
    with filter_errors():
        db = await analytics_store(request, base.workspace_id)
        found = await analytics_breakdown.have_values(db, site.id, w.start, w.end, props=props, filters=filters,
                                                      domain=site.domain)
    return json_response({"data": found})


PROPERTY_KEYS_DEFAULT, PROPERTY_KEYS_MAX = 20, 100


async def property_keys(request: web.Request) -> web.Response:
    """GET /api/analytics/property-keys?siteId&range&limit&filter=…: the custom property keys of the matching
    events, most used first, so that a dashboard can offer the `props:<key>` breakdowns that have data."""
    base = await base_params(request)
    limit = count_param(request, "limit", PROPERTY_KEYS_DEFAULT, PROPERTY_KEYS_MAX)
    offset = offset_param(request)
    site, filters = await site_and_filters(request, base)
    w = base.window
    with filter_errors():
        db = await analytics_store(request, base.workspace_id)
        rows = await analytics_breakdown.property_keys(db, site.id, w.start, w.end, filters=filters, limit=limit,
                                                       offset=offset)
    return json_response({"data": [{"key": k, "events": n} for k, n in rows], "limit": limit})


def setup_analytics_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/analytics/overview", shareable(overview))
    router.add_get("/analytics/timeseries", shareable(timeseries))
    router.add_get("/analytics/breakdown", shareable(breakdown))
    router.add_get("/analytics/has-values", shareable(has_values))
    router.add_get("/analytics/property-keys", shareable(property_keys))
    for path, dim in _DIMS.items():
        router.add_get(f"/analytics/{path}", shareable(_top_handler(dim)))
    router.add_get("/analytics/events", analytics_events.events)
    router.add_get("/analytics/export", analytics_events.export)
