"""Plausible's Sites API, the reads: GET /api/v1/sites and /api/v1/sites/{site_id}, with a Tally key of the read
scope (app/views/stats_api.py's `keyed`): the sites of the key's workspace by domain and time zone, so that
tools written for Plausible find the sites they may read (the `plausible-mcp` tools' `doctor` lists them to
check a key). Creating, changing and deleting sites stay the dashboard's (/api/sites)."""

from __future__ import annotations

from aiohttp import web

from app.appkeys import POOL
from app.responses import SiteError, json_response
from app.views.stats_api import KEY, keyed, keyed_site, whole_number
from storage import sites as site_store

DEFAULT_LIMIT, MAX_LIMIT = 100, 100


@keyed
async def list_sites(request: web.Request) -> web.Response:
    """The workspace's sites, newest first, a page at a time: `after` is the cursor the previous page gave
    (Plausible's cursors are opaque; Tally's is the number of sites before the page)."""
    if "before" in request.query:
        raise SiteError(400, "before is not offered: page forward with after")
    limit = whole_number(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = whole_number(request, "after", 0, 0, 10**9)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await site_store.list_sites(conn, request[KEY].workspace_id, limit + 1, offset)
    more = len(rows) > limit
    return json_response({"sites": [{"domain": r["domain"], "timezone": r["time_zone"]} for r in rows[:limit]],
                          "meta": {"after": str(offset + limit) if more else None, "before": None, "limit": limit}})


@keyed
async def get_site(request: web.Request) -> web.Response:
    """One site, named by its domain (or Tally's id). Tally keeps no allow-list of custom properties: every
    property sent is kept, so `custom_properties` is empty."""
    async with request.config_dict[POOL].acquire() as conn:
        row = await keyed_site(conn, request, request.match_info["site_id"])
    return json_response({"domain": row["domain"], "timezone": row["time_zone"], "custom_properties": []})


def setup_plausible_sites_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/v1/sites", list_sites)
    router.add_get("/v1/sites/{site_id}", get_site)
