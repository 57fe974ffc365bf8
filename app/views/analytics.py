"""GET /api/analytics/overview, /timeseries and /top-*: dashboard reads of one site.

Every handler checks the session (401), then its parameters (400), then that the site belongs to the
caller's workspace (404), and only then queries.
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from app.responses import SiteError, iso_ms, json_response
from app.views import analytics_events
from app.views.analytics_params import (
    Site,
    Window,
    analytics_store,
    base_params,
    count_param,
    filters_param,
    interval_param,
    resolve_site,
)
from storage import analytics as store
from storage.clickhouse import AnalyticsStore

TOP_DEFAULT, TOP_MAX = 20, 100
_LABELS = {"minute": "%H:%M", "hour": "%b %d %H:00", "day": "%b %d"}
_DIMS = {"top-pages": "p", "top-referrers": "r", "top-countries": "c"}


def point(bucket: datetime, value: int, interval: str) -> dict:
    return {"timestamp": iso_ms(bucket), "value": value, "label": bucket.strftime(_LABELS[interval])}


def top_rows(rows: list[tuple[str, int]], total: int) -> list[dict]:
    return [{"key": key, "count": count, "percentage": round(100 * count / total, 2) if total else 0.0}
            for key, count in rows]


async def _series(db: AnalyticsStore, site_id: str, window: Window, interval: str, name: str,
                  filters: store.Filters) -> list[dict]:
    first, last = window.buckets(interval)
    points = await store.series(db, site_id, window.start, window.end, name=name, interval=interval,
                                first=first, last=last, filters=filters)
    return [point(bucket, value, interval) for bucket, value in points]


async def overview_body(db: AnalyticsStore, site: Site, w: Window, filters: store.Filters) -> dict:
    """The overview of a site."""
    name = filters.name or "pageview"
    try:
        totals = await store.totals(db, site.id, w.start, w.end, filters)
    except store.UnsupportedFilter as exc:
        raise SiteError(400, str(exc)) from None
    sessions = await store.session_stats(db, site.id, w.start, w.end, filters)
    tops = {}
    for dim in store.TOP_DIMENSIONS:
        rows, total = await store.top(db, site.id, w.start, w.end, dim=dim, name=name, domain=site.domain,
                                      limit=TOP_DEFAULT, filters=filters)
        tops[dim] = top_rows(rows, total)
    series = await _series(db, site.id, w, w.unit, name, filters)
    return {
        "totalEvents": totals.events,
        "totalPageviews": totals.pageviews,
        "uniqueVisitors": totals.visitors,
        "sessions": sessions.sessions,
        "bounceRate": round(100 * sessions.bounces / sessions.sessions, 2) if sessions.sessions else 0.0,
        "avgSessionDuration": round(sessions.avg_ms),
        "topPages": tops["p"],
        "topReferrers": tops["r"],
        "topCountries": tops["c"],
        "timeSeries": series,
        "range": w.range,
        "interval": w.unit,
    }


async def overview(request: web.Request) -> web.Response:
    base = await base_params(request)
    filters = filters_param(request)
    site = await resolve_site(request, base)
    return json_response(await overview_body(await analytics_store(request), site, base.window, filters))


async def timeseries(request: web.Request) -> web.Response:
    base = await base_params(request)
    interval = interval_param(request, base.window)
    name = request.query.get("eventName") or "pageview"
    site = await resolve_site(request, base)
    data = await _series(await analytics_store(request), site.id, base.window, interval, name, store.Filters())
    return json_response({"data": data, "interval": interval, "eventName": name})


async def _top_list(request: web.Request, dim: str) -> web.Response:
    base = await base_params(request)
    limit = count_param(request, "limit", TOP_DEFAULT, TOP_MAX)
    name = request.query.get("eventName") or "pageview"
    site = await resolve_site(request, base)
    w = base.window
    rows, total = await store.top(await analytics_store(request), site.id, w.start, w.end, dim=dim, name=name,
                                  domain=site.domain, limit=limit, filters=store.Filters())
    return json_response({"data": top_rows(rows, total), "total": total})


def _top_handler(dim: str):
    async def top_list(request: web.Request) -> web.Response:
        return await _top_list(request, dim)

    return top_list


def setup_analytics_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/api/analytics/overview", overview)
    router.add_get("/api/analytics/timeseries", timeseries)
    for path, dim in _DIMS.items():
        router.add_get(f"/api/analytics/{path}", _top_handler(dim))
    router.add_get("/api/analytics/events", analytics_events.events)
    router.add_get("/api/analytics/export", analytics_events.export)
