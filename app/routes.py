"""Every route of the service, in one table: the top-level routes (operations, pages, public dashboards,
shared links' pages), the keyed API's sub-application mounted at /v1 and the site API's at /api. Route
setup only adds routes: the applications, their middlewares and everything long-lived are made in
app/server.py."""

from __future__ import annotations

from aiohttp import web

from app.views import dashboard_auth, events, health, plausible, segment, users
from app.views.analytics import setup_analytics_routes
from app.views.api_keys import setup_api_key_routes
from app.views.dashboards import setup_dashboard_routes
from app.views.data_sources import setup_data_source_routes
from app.views.goals import setup_goal_routes
from app.views.pages import setup_page_routes
from app.views.plausible_sites import setup_plausible_sites_routes
from app.views.public_dashboards import setup_public_dashboard_routes
from app.views.reports import setup_report_routes
from app.views.segment import setup_segment_routes
from app.views.shared_links import setup_share_page, setup_shared_link_routes
from app.views.sites import setup_site_api
from app.views.stats_api import setup_stats_api_routes
from app.views.stats_api_v1 import setup_stats_api_v1_routes


def setup_routes(root: web.Application, v1: web.Application, api: web.Application) -> None:
    """Add the routes of each application; v1 and api paths are relative to their mount points."""
    r = root.router
    r.add_get("/healthz", health.healthz)
    r.add_get("/readyz", health.readyz)
    r.add_get("/metrics", health.prometheus)
    r.add_get("/openapi.json", health.openapi)
    setup_public_dashboard_routes(r)
    setup_page_routes(r)
    setup_share_page(r)

    k = v1.router
    k.add_post("/events", events.post_event)
    k.add_post("/events/batch", events.post_batch)
    k.add_get("/events", events.list_events)
    k.add_post("/identify", segment.identify)  # Tally's with a Bearer key, Segment's otherwise
    k.add_get("/users", users.list_users)
    k.add_get("/users/{user_id}", users.get_user)
    k.add_delete("/users/{user_id}", users.delete_user)
    setup_dashboard_routes(k)
    setup_data_source_routes(k)
    setup_report_routes(k)
    setup_segment_routes(k)

    s = api.router
    s.add_post("/auth/login", dashboard_auth.login)
    s.add_post("/auth/logout", dashboard_auth.logout)
    s.add_get("/auth/me", dashboard_auth.me)
    setup_api_key_routes(s)
    setup_analytics_routes(s)
    setup_site_api(s)
    plausible.setup(s)
    setup_stats_api_routes(s)
    setup_stats_api_v1_routes(s)
    setup_plausible_sites_routes(s)
    setup_goal_routes(s)
    setup_shared_link_routes(s)
