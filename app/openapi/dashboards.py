"""Keyed dashboards and charts (/v1/dashboards…) and publicly shared dashboards (/public/…)."""

from __future__ import annotations

from app.openapi.common import KEYED, RATE_HEADERS, json_body, keyed_errors, path_param, query, ref

_TS = {"type": "string", "format": "date-time"}
_NAME = {"type": "string", "minLength": 1, "maxLength": 200}
_EVENT = {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "maxLength": 128}
_PROPERTY = {"type": "string", "minLength": 1, "maxLength": 255}
_CHART_TYPE = {"type": "string", "enum": ["line", "bar", "pie", "funnel", "table"]}
_STEPS = {"type": "array", "minItems": 1, "maxItems": 9, "items": _EVENT,
          "description": "funnel charts only (required there): the events after `event`, in order"}


def _body(name: str) -> dict:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


def _ok(schema: dict, description: str = "OK") -> dict:
    return json_body(schema, description, RATE_HEADERS)


_NO_CONTENT = {"description": "done; no body", "headers": RATE_HEADERS}
_DASH = [path_param("id")]
_CHART = [path_param("id"), path_param("chart_id")]
_RANGE = [
    query("from", {"type": "string", "format": "date-time"},
          description="range start (inclusive); default 7 days before `to`"),
    query("to", {"type": "string", "format": "date-time"}, description="range end (inclusive); default now"),
    query("interval", {"type": "string", "enum": ["hour", "day"], "default": "day"},
          description="bucket width for line/bar charts; at most 1000 buckets per range"),
]


def _op(summary: str, responses: dict, *, params: list | None = None, body: str | None = None) -> dict:
    op = {"summary": summary, "security": KEYED, "parameters": params or [], "responses": responses}
    if body:
        op["requestBody"] = _body(body)
    return op


PATHS = {
    "/v1/dashboards": {
        "get": _op("List dashboards in creation order (scope read)", {
            "200": _ok(ref("DashboardList")), **keyed_errors(400, 401, 403, 429)}, params=[
            query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
            query("cursor", {"type": "string"})]),
        "post": _op("Create a dashboard, optionally with charts (scopes read and write)", {
            "201": _ok(ref("Dashboard"), "created"), **keyed_errors(400, 401, 403, 413, 429)},
            body="DashboardIn"),
    },
    "/v1/dashboards/{id}": {
        "get": _op("Get a dashboard with its charts (scope read)", {
            "200": _ok(ref("Dashboard")), **keyed_errors(401, 403, 404, 429)}, params=_DASH),
        "patch": _op("Rename a dashboard or change its description (scopes read and write)", {
            "200": _ok(ref("Dashboard")), **keyed_errors(400, 401, 403, 404, 429)}, params=_DASH,
            body="DashboardPatch"),
        "delete": _op("Delete a dashboard and its charts (scope write)", {
            "204": _NO_CONTENT, **keyed_errors(401, 403, 404, 429)}, params=_DASH),
    },
    "/v1/dashboards/{id}/charts": {
        "post": _op("Add a chart at the end of a dashboard (scopes read and write)", {
            "201": _ok(ref("Chart"), "created"), **keyed_errors(400, 401, 403, 404, 409, 429)},
            params=_DASH, body="ChartIn"),
    },
    "/v1/dashboards/{id}/charts/{chart_id}": {
        "patch": _op("Change a chart; the merged chart is validated as a whole (scopes read and write)", {
            "200": _ok(ref("Chart")), **keyed_errors(400, 401, 403, 404, 429)}, params=_CHART,
            body="ChartPatch"),
        "delete": _op("Remove a chart (scope write)", {
            "204": _NO_CONTENT, **keyed_errors(401, 403, 404, 429)}, params=_CHART),
    },
    "/v1/dashboards/{id}/charts/{chart_id}/data": {
        "get": _op("A chart's numbers over a range (scope read)", {
            "200": _ok(ref("ChartData")), **keyed_errors(400, 401, 403, 404, 429, 503)}, params=_CHART + _RANGE),
    },
    "/v1/dashboards/{id}/share": {
        "post": _op("Share publicly: sets public_url (kept if already shared) (scopes read and write)", {
            "200": _ok(ref("Dashboard")), **keyed_errors(401, 403, 404, 429)}, params=_DASH),
        "delete": _op("Stop sharing: the public URL answers 404 from now on (scope write)", {
            "204": _NO_CONTENT, **keyed_errors(401, 403, 404, 429)}, params=_DASH),
    },
    "/public/dashboards/{token}": {
        "get": {"summary": "Read-only page of a shared dashboard (no key)", "security": [],
                "parameters": [path_param("token")], "responses": {
                    "200": {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}},
                    "404": {"description": "unknown or revoked link",
                            "content": {"text/html": {"schema": {"type": "string"}}}},
                    **keyed_errors(429)}},
    },
    "/public/dashboards/{token}/data": {
        "get": {"summary": "A shared dashboard and every chart's data, for its page (no key)", "security": [],
                "parameters": [path_param("token"), *_RANGE],
                "responses": {"200": json_body(ref("PublicDashboardData")), **keyed_errors(400, 404, 429, 503)}},
    },
    "/public/assets/{name}": {
        "get": {"summary": "Script and stylesheet of the shared-dashboard page", "security": [],
                "parameters": [path_param("name")], "responses": {
                    "200": {"description": "the file", "content": {"application/javascript": {}, "text/css": {}}},
                    **keyed_errors(404)}},
    },
}

_FILTER = {
    "type": "object", "required": ["property", "operator", "value"], "additionalProperties": False,
    "properties": {
        "property": _PROPERTY,
        "operator": {"type": "string", "enum": ["eq", "neq", "contains", "gt", "lt"],
                     "description": "eq/neq/contains compare text (contains ignores case; neq matches events "
                                    "without the property); gt/lt compare numbers and need a numeric value"},
        "value": {"type": ["string", "number", "boolean"]},
    },
}
_CHART_FIELDS = {
    "title": _NAME, "type": _CHART_TYPE, "event": _EVENT,
    "filters": {"type": "array", "maxItems": 20, "items": _FILTER},
    "group_by": {"type": ["string", "null"], "minLength": 1, "maxLength": 255,
                 "description": "event property to split by; not allowed on funnels"},
    "steps": _STEPS,
}
_SERIES = {
    "type": "object", "required": ["name", "points"],
    "properties": {
        "name": {"type": "string", "description": "group value, '(none)' without the property, '(other)' beyond "
                                                  "the top 20, the event name when ungrouped, or the funnel step"},
        "points": {"type": "array", "items": {"type": "object", "required": ["timestamp", "value"],
                                              "properties": {"timestamp": _TS, "value": {"type": "integer"}}}},
    },
}
_CHART_DATA_PROPS = {
    "chart_id": {"type": "string"}, "type": _CHART_TYPE, "interval": {"type": "string", "enum": ["hour", "day"]},
    "from": _TS, "to": _TS, "series": {"type": "array", "items": _SERIES},
}

SCHEMAS = {
    "ChartFilter": _FILTER,
    "Chart": {
        "type": "object", "required": ["id", "title", "type", "event", "filters", "group_by"],
        "properties": {"id": {"type": "string", "description": "chrt_…"}, **_CHART_FIELDS},
    },
    "ChartIn": {"type": "object", "required": ["title", "type", "event"], "additionalProperties": False,
                "properties": _CHART_FIELDS},
    "ChartPatch": {"type": "object", "additionalProperties": False,
                   "properties": {**_CHART_FIELDS, "steps": {**_STEPS, "type": ["array", "null"]}}},
    "DashboardSummary": {
        "type": "object", "required": ["id", "name", "created_at", "updated_at", "chart_count"],
        "properties": {"id": {"type": "string", "description": "dsh_…"}, "name": {"type": "string"},
                       "created_at": _TS, "updated_at": _TS, "chart_count": {"type": "integer"}},
    },
    "DashboardList": {
        "type": "object", "required": ["data", "next_cursor", "has_more"],
        "properties": {"data": {"type": "array", "items": ref("DashboardSummary")},
                       "next_cursor": ref("Cursor"), "has_more": {"type": "boolean"}},
    },
    "Dashboard": {
        "type": "object",
        "required": ["id", "name", "description", "charts", "created_at", "updated_at", "public_url"],
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "description": {"type": ["string", "null"]},
            "charts": {"type": "array", "items": ref("Chart")}, "created_at": _TS,
            "updated_at": {**_TS, "description": "moves on every change, chart changes and sharing included"},
            "public_url": {"type": ["string", "null"], "description": "null while private"},
        },
    },
    "DashboardIn": {
        "type": "object", "required": ["name"], "additionalProperties": False,
        "properties": {"name": _NAME, "description": {"type": ["string", "null"], "maxLength": 2000},
                       "charts": {"type": "array", "maxItems": 50, "items": ref("ChartIn")}},
    },
    "DashboardPatch": {
        "type": "object", "additionalProperties": False,
        "properties": {"name": _NAME, "description": {"type": ["string", "null"], "maxLength": 2000}},
    },
    "ChartData": {
        "type": "object", "required": list(_CHART_DATA_PROPS), "properties": _CHART_DATA_PROPS,
        "description": "line/bar: one series per group with a point per bucket (bucket start, UTC; empty buckets "
                       "are 0). pie/table: one series per group with one point (stamped `from`) holding the total. "
                       "funnel: one series per step, in order, with one point holding the distinct users who "
                       "reached that step in order within the range.",
    },
    "PublicDashboardData": {
        "type": "object", "required": ["dashboard", "from", "to", "interval", "data"],
        "properties": {
            "dashboard": {"type": "object", "properties": {
                "name": {"type": "string"}, "description": {"type": ["string", "null"]}, "updated_at": _TS,
                "charts": {"type": "array", "items": ref("Chart")}}},
            "from": _TS, "to": _TS, "interval": {"type": "string"},
            "data": {"type": "array", "items": ref("ChartData")},
        },
    },
}
