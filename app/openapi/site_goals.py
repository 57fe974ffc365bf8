"""Goals of a site (/api/sites/{site_id}/goals) and Plausible's ingestion endpoint (/api/event)."""

from __future__ import annotations

from app.openapi.common import SESSION, json_body, path_param, ref, site_errors
from app.views.ingest import MAX_ENGAGED_MS
from app.views.plausible import ALIASES

_GOALS = ["goals"]
_GOAL_BODY = {"required": True, "content": {"application/json": {"schema": ref("GoalIn")},
                                            "application/x-www-form-urlencoded": {"schema": ref("GoalIn")}}}
_CORS = {"Access-Control-Allow-Origin": {"schema": {"type": "string"},
                                         "description": "the request's Origin, when allowed"}}

PATHS = {
    "/api/sites/{site_id}/goals": {
        "parameters": [path_param("site_id")],
        "get": {"summary": "The site's goals, oldest first", "tags": _GOALS, "security": SESSION,
                "responses": {"200": json_body({"type": "object", "required": ["goals"], "properties": {
                    "goals": {"type": "array", "items": ref("Goal")}}}), **site_errors(401, 404)}},
        "post": {"summary": "Add a goal (Plausible's Sites-API fields); an existing identical goal is returned "
                            "with 200", "tags": _GOALS, "security": SESSION, "requestBody": _GOAL_BODY,
                 "responses": {"201": json_body(ref("Goal"), "created"), "200": json_body(ref("Goal"), "exists"),
                               **site_errors(400, 401, 404, 409, 413)}},
        "delete": {"summary": "Delete the goal the body describes (its creation fields, or its id)",
                   "tags": _GOALS, "security": SESSION, "requestBody": _GOAL_BODY,
                   "responses": {"200": json_body(ref("Deleted")), **site_errors(400, 401, 404, 413)}},
    },
    "/api/sites/{site_id}/goals/{goal_id}": {
        "parameters": [path_param("site_id"), path_param("goal_id")],
        "delete": {"summary": "Delete a goal", "tags": _GOALS, "security": SESSION,
                   "responses": {"200": json_body(ref("Deleted")), **site_errors(401, 404)}},
    },
    "/api/event": {
        "post": {
            "summary": "Record one event sent by a Plausible tracker (Plausible's Events API payload)",
            "description": ("The site is the one registered for `domain`; everything else is as on "
                            "/api/service/event. Answers 202 with the text `ok` once the event is committed "
                            "(or dropped as a bot or over a rate limit)."),
            "tags": ["site ingestion"],
            "requestBody": {"required": True, "content": {"text/plain": {"schema": ref("PlausibleEventIn")},
                                                          "application/json": {"schema": ref("PlausibleEventIn")}}},
            "responses": {
                "202": {"description": "accepted", "headers": _CORS,
                        "content": {"text/plain": {"schema": {"type": "string", "const": "ok"}}}},
                "400": json_body(ref("SiteError"), "invalid json, or invalid payload with issues"),
                **site_errors(403, 404, 413, 500, 503),
            },
        },
        "options": {"summary": "CORS preflight (cached 24 hours)", "tags": ["site ingestion"],
                    "responses": {"204": {"description": "origin allowed", "headers": _CORS}, **site_errors(403)}},
    },
}

_NULLABLE_STR = {"type": ["string", "null"]}
# Plausible's Events API fields under their long names, and the short names its tracker sends.
_PLAUSIBLE_FIELDS = {
    "name": {"type": "string", "maxLength": 64, "description": "or `n`; required"},
    "url": {"type": "string", "maxLength": 2048, "description": "or `u`; required"},
    "domain": {"type": "string", "description": "or `d`; required; a comma-separated list records for its first "
                                                "domain"},
    "referrer": {"type": ["string", "null"], "maxLength": 2048, "description": "or `r`"},
    "props": {"description": "or `p`: an object, or an object encoded as a JSON string"},
    "revenue": {"description": "or `$`: {currency, amount}; stored as the props $revenue_amount and "
                               "$revenue_currency"},
    "interactive": {"type": "boolean", "description": "or `i`; validated, not stored"},
}
_PLAUSIBLE_SHORT = {long: short for long, short in ALIASES if long in _PLAUSIBLE_FIELDS}  # as the handler reads them
SCHEMAS = {
    "GoalIn": {
        "type": "object", "required": ["goal_type"],
        "properties": {
            "goal_type": {"type": "string", "enum": ["event", "page"]},
            "event_name": {"type": "string", "minLength": 1, "maxLength": 64, "description": "event goals"},
            "page_path": {"type": "string", "pattern": "^/", "maxLength": 2048,
                          "description": "page goals; `*` matches within a path segment, `**` across segments"},
            "id": {"type": "string", "description": "DELETE only: the goal's id instead of its fields"},
        },
    },
    "Goal": {
        "type": "object", "required": ["id", "display_name", "goal_type", "event_name", "page_path", "createdAt"],
        "properties": {
            "id": {"type": "string"}, "display_name": {"type": "string", "description": "the event name, or "
                                                       "`Visit <page_path>`; what `goal==` filters name"},
            "goal_type": {"type": "string", "enum": ["event", "page"]},
            "event_name": _NULLABLE_STR, "page_path": _NULLABLE_STR,
            "createdAt": {"type": "string", "format": "date-time"},
        },
    },
    "Deleted": {"type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "boolean"}}},
    "PlausibleEventIn": {
        "type": "object",
        "description": "Each field may be sent under its long or its short (tracker) name.",
        "properties": {
            **_PLAUSIBLE_FIELDS,
            **{short: {**_PLAUSIBLE_FIELDS[long], "description": f"`{long}` under the tracker's name"}
               for long, short in _PLAUSIBLE_SHORT.items()},
            "w": {"type": "number", "description": "viewport width"},
            "h": {"description": "hash mode: 1 keeps the URL fragment in the path"},
            "sd": {"type": "integer", "minimum": 0, "description": "an engagement event's scroll depth in percent "
                                                                  "(above 100 stored as 100)"},
            "e": {"type": "integer", "minimum": 0, "maximum": MAX_ENGAGED_MS,
                  "description": "an engagement event's time on the page in ms"},
        },
        # name, url and domain are required, each under either of its names.
        "allOf": [*({"anyOf": [{"required": [long]}, {"required": [_PLAUSIBLE_SHORT[long]]}]}
                    for long in ("name", "url", "domain")),
                  # An engagement event (the tracker's report on a page left or hidden) carries both numbers.
                  {"if": {"anyOf": [{"required": ["name"], "properties": {"name": {"const": "engagement"}}},
                                    {"required": ["n"], "properties": {"n": {"const": "engagement"}}}]},
                   "then": {"required": ["sd", "e"]}}],
    },
}
