"""GET /api/analytics/realtime: live numbers of one site from the realtime window, not the database."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from actors.realtime import LiveEvent, RealtimeSnapshot
from app.appkeys import POOL, SITE_RUNTIME
from app.input_rules import query_int, storable_text
from app.responses import SiteError, iso_ms, json_response
from app.shared_access import check_site, reader, shareable
from app.site_runtime import SiteInfo
from storage import sites as site_store

DEFAULT_WINDOW = 60
MAX_WINDOW = 3600
_WINDOW_ISSUE = {"field": "window", "message": f"an integer of seconds from 1 to {MAX_WINDOW}"}


async def site_in_workspace(request: web.Request, site_id: str, workspace_id: int) -> SiteInfo:
    """The site from the runtime's cache (read through); 404 unless it belongs to the workspace."""
    if not storable_text(site_id):  # a query parameter: the path_ids middleware sees only the path
        raise SiteError(404, "not found")
    cache = request.config_dict[SITE_RUNTIME].sites
    cached, info = cache.get(site_id)
    if not cached:
        async with request.config_dict[POOL].acquire() as conn:
            info = cache.put_row(site_id, await site_store.site_by_id(conn, site_id))
    if info is None or info.workspace_id != workspace_id:
        raise SiteError(404, "not found")
    return info


def _window(request: web.Request) -> int:
    try:
        return query_int(request.query.get("window"), DEFAULT_WINDOW, 1, MAX_WINDOW)
    except ValueError:
        raise SiteError(400, "invalid window", issues=[_WINDOW_ISSUE]) from None


async def realtime(request: web.Request) -> web.Response:
    who = await reader(request)
    site_id = request.query.get("siteId", "").strip()  # as the other reads take it (analytics_params)
    if not site_id:
        raise SiteError(400, "missing siteId")
    window = _window(request)
    check_site(who, site_id)
    site = await site_in_workspace(request, site_id, who.workspace_id)
    runtime = request.config_dict[SITE_RUNTIME]
    now_ms = int(runtime.clock().timestamp() * 1000)
    body = render(await runtime.realtime.snapshot(site.id, now_ms, window))
    if who.site_id is not None:
        body["recentEvents"] = []  # single events are the event log's, which a shared link cannot read
    return json_response(body)


def _live_event(e: LiveEvent) -> dict:
    return {"id": e.id, "name": e.name, "path": e.path, "country": e.country,
            "timestamp": iso_ms(datetime.fromtimestamp(e.at_ms / 1000, UTC))}


def render(snap: RealtimeSnapshot) -> dict:
    """The /api body of a realtime snapshot (site-api.md): camelCase keys, ISO times."""
    return {
        "activeVisitors": snap.active_visitors,
        "pageviewsPerMinute": snap.pageviews_per_minute,
        "eventsPerMinute": snap.events_per_minute,
        "topActivePages": [{"key": path, "count": count} for path, count in snap.top_pages],
        "recentEvents": [_live_event(e) for e in snap.recent],
    }


def setup(router: web.UrlDispatcher) -> None:
    router.add_get("/analytics/realtime", shareable(realtime))
