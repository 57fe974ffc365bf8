"""Every route of the service, in one table."""

from __future__ import annotations

from aiohttp import web

from app.views import dashboard_auth, events, health, plausible, segment, users
from app.views.analytics import setup_analytics_routes
from app.views.api_keys import setup_api_key_routes
from app.views.dashboards import setup_dashboard_routes
from app.views.data_sources import setup_data_source_routes
from app.views.goals import setup_goal_routes
from app.views.pages import setup_page_routes
from app.views.public_dashboards import setup_public_dashboard_routes
from app.views.reports import setup_report_routes
from app.views.segment import setup_segment_routes
from app.views.sites import setup_site_api


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/healthz", health.healthz)
    r.add_get("/readyz", health.readyz)
    r.add_get("/metrics", health.prometheus)
    r.add_get("/openapi.json", health.openapi)

    r.add_post("/v1/events", events.post_event)
    r.add_post("/v1/events/batch", events.post_batch)
    r.add_get("/v1/events", events.list_events)
    r.add_post("/v1/identify", segment.identify)  # Tally's with a Bearer key, Segment's otherwise
    r.add_get("/v1/users", users.list_users)
    r.add_get("/v1/users/{user_id}", users.get_user)
    r.add_delete("/v1/users/{user_id}", users.delete_user)

    r.add_post("/api/auth/login", dashboard_auth.login)
    r.add_post("/api/auth/logout", dashboard_auth.logout)
    r.add_get("/api/auth/me", dashboard_auth.me)

    setup_api_key_routes(r)
    setup_dashboard_routes(r)
    setup_data_source_routes(r)
    setup_public_dashboard_routes(r)
    setup_report_routes(r)
    setup_segment_routes(r)
    setup_page_routes(r)
    setup_analytics_routes(r)
    setup_site_api(app)
    plausible.setup(app)
    setup_goal_routes(r)
