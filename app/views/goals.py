"""GET/POST/DELETE /api/sites/{site_id}/goals: a site's conversion goals, with Plausible's Sites-API
fields: {"goal_type": "event", "event_name": "signup"} or {"goal_type": "page", "page_path": "/thanks/**"}.

Dashboard session and workspace scoping as on the other /api/sites routes: no session is a 401, a site
outside the caller's workspace (or none) a 404. Creating a goal the site already has returns that goal
(200) instead of a second one (201), like Plausible's find-or-create.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.appkeys import POOL
from app.bodies import decode_site_json, read_site_body, read_site_form
from app.input_rules import storable_text
from app.responses import SiteError, iso_ms, json_response
from app.views.sites import path_site
from storage import goals as goal_store
from storage.ids import new_id

MAX_GOALS = 100  # per site
MAX_EVENT_NAME = 64  # as ingestion's event names
MAX_PAGE_PATH = 2048  # as ingestion's paths
BODY_LIMIT = 16 * 1024


def goal_json(row) -> dict:
    return {
        "id": row["id"], "display_name": goal_store.display_name(row["goal_type"], row["event_name"], row["page_path"]),
        "goal_type": row["goal_type"], "event_name": row["event_name"], "page_path": row["page_path"],
        "createdAt": iso_ms(row["created_at"]),
    }


async def _body(request: web.Request) -> dict[str, Any]:
    """A JSON object or form fields (Plausible's Sites API takes either)."""
    if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        return await read_site_form(request, BODY_LIMIT)
    raw = await read_site_body(request, BODY_LIMIT)
    data = decode_site_json(raw)
    if not isinstance(data, dict):
        raise SiteError(400, "invalid goal", issues=[{"field": "", "message": "expected a JSON object"}])
    return data


def _text(issues: list, data: dict, field: str, max_length: int) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        issues.append({"field": field, "message": "must be a string"})
        return None
    value = value.strip()
    if not value or len(value) > max_length or not storable_text(value):
        issues.append({"field": field, "message": f"must be 1 to {max_length} characters"})
        return None
    return value


def parse_goal(data: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(goal_type, event_name, page_path) or a 400 naming every field that is wrong."""
    issues: list[dict[str, str]] = []
    goal_type = data.get("goal_type")
    event_name = _text(issues, data, "event_name", MAX_EVENT_NAME)
    page_path = _text(issues, data, "page_path", MAX_PAGE_PATH)
    if goal_type not in ("event", "page"):
        issues.append({"field": "goal_type", "message": "must be event or page"})
    elif goal_type == "event":
        if event_name is None and not issues:
            issues.append({"field": "event_name", "message": "required for an event goal"})
        if data.get("page_path") is not None:
            issues.append({"field": "page_path", "message": "only for a page goal"})
    else:
        if page_path is None and not issues:
            issues.append({"field": "page_path", "message": "required for a page goal"})
        elif page_path is not None and not page_path.startswith("/"):
            issues.append({"field": "page_path", "message": "must start with /"})
        if data.get("event_name") is not None:
            issues.append({"field": "event_name", "message": "only for an event goal"})
    if issues:
        raise SiteError(400, "invalid goal", issues=issues)
    return goal_type, event_name, page_path


async def list_goals(request: web.Request) -> web.Response:
    site = await path_site(request)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await goal_store.list_goals(conn, site["id"])
    return json_response({"goals": [goal_json(r) for r in rows]})


async def create_goal(request: web.Request) -> web.Response:
    site = await path_site(request)
    goal_type, event_name, page_path = parse_goal(await _body(request))
    async with request.config_dict[POOL].acquire() as conn:
        existing = await goal_store.find_goal(conn, site["id"], goal_type, event_name, page_path)
        if existing is not None:
            return json_response(goal_json(existing))
        if await goal_store.count_goals(conn, site["id"]) >= MAX_GOALS:
            raise SiteError(409, "too many goals", limit=MAX_GOALS)
        row = await goal_store.create_goal(conn, new_id("goal"), site["id"], goal_type, event_name, page_path)
        if row is None:  # created by a concurrent request a moment ago
            row = await goal_store.find_goal(conn, site["id"], goal_type, event_name, page_path)
            return json_response(goal_json(row))
    return json_response(goal_json(row), status=201)


async def _delete(request: web.Request, site_id: str, goal_id: str | None) -> web.Response:
    async with request.config_dict[POOL].acquire() as conn:
        deleted = (goal_id is not None and storable_text(goal_id)
                   and await goal_store.delete_goal(conn, site_id, goal_id))
    if not deleted:
        raise SiteError(404, "goal not found")
    return json_response({"deleted": True})


async def delete_goal(request: web.Request) -> web.Response:
    """DELETE …/goals/{goal_id}."""
    site = await path_site(request)
    return await _delete(request, site["id"], request.match_info["goal_id"])


async def delete_goal_by_fields(request: web.Request) -> web.Response:
    """DELETE …/goals with the goal's creation body (or {"id": …}): what a script that POSTed it knows."""
    site = await path_site(request)
    data = await _body(request)
    if isinstance(data.get("id"), str):
        return await _delete(request, site["id"], data["id"])
    goal_type, event_name, page_path = parse_goal(data)
    async with request.config_dict[POOL].acquire() as conn:
        row = await goal_store.find_goal(conn, site["id"], goal_type, event_name, page_path)
    return await _delete(request, site["id"], row["id"] if row is not None else None)


def setup_goal_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/sites/{site_id}/goals", list_goals)
    router.add_post("/sites/{site_id}/goals", create_goal)
    router.add_delete("/sites/{site_id}/goals", delete_goal_by_fields)
    router.add_delete("/sites/{site_id}/goals/{goal_id}", delete_goal)
