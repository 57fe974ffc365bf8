"""Site ingestion (POST /api/service/event), realtime, sites and DNS verification."""

from __future__ import annotations

from app.openapi.common import SESSION, SHARE_AUTH, json_body, query, ref, site_errors
from app.time_zones import ZONES
from app.views.ingest import MAX_ENGAGED_MS

_CORS = {
    "Access-Control-Allow-Origin": {"schema": {"type": "string"},
                                    "description": "the request's Origin, when allowed"},
    "Vary": {"schema": {"type": "string", "const": "Origin"}},
}
_SITE_Q = query("site", {"type": "string", "minLength": 1}, True, "site id")
_TAGS = ["site ingestion"]


def _event_body() -> dict:
    schema = ref("SiteEventIn")
    # text/plain keeps browser sends "simple" (no preflight); the body is JSON either way.
    return {"required": True, "content": {"application/json": {"schema": schema},
                                          "text/plain": {"schema": schema}}}


PATHS = {
    "/api/service/event": {
        "post": {
            "summary": "Record one site event (no key; origin-checked in production)",
            "description": (
                "Answers 202 with an empty body once the event is committed. Events from bots and "
                "headless browsers, and events over the per-site or per-IP rate limit "
                "(TALLY_SITE_EVENTS_PER_MIN, TALLY_IP_EVENTS_PER_MIN), are dropped with the same 202. "
                "Bodies are capped at 32 KB."),
            "tags": _TAGS,
            "requestBody": _event_body(),
            "responses": {
                "202": {"description": "accepted and stored (or silently dropped)", "headers": _CORS},
                "400": json_body(ref("SiteError"), "invalid json, or invalid payload with issues"),
                **site_errors(403, 404, 413, 500, 503),
            },
        },
        "options": {
            "summary": "CORS preflight (cached 24 hours)",
            "tags": _TAGS,
            "responses": {"204": {"description": "origin allowed", "headers": {
                **_CORS,
                "Access-Control-Allow-Methods": {"schema": {"type": "string"}},
                "Access-Control-Allow-Headers": {"schema": {"type": "string"}},
                "Access-Control-Max-Age": {"schema": {"type": "string", "const": "86400"}},
            }}, **site_errors(403)},
        },
    },
    "/api/analytics/realtime": {"get": {
        "summary": "Live activity of a site over the last `window` seconds (no database query); through a "
                   "shared link's token, recentEvents is empty",
        "tags": ["site analytics"], "security": SESSION,
        "parameters": [
            query("siteId", {"type": "string", "minLength": 1}, True, "site to query (must be in your workspace)"),
            query("window", {"type": "integer", "minimum": 1, "maximum": 3600, "default": 60}),
            SHARE_AUTH,
        ],
        "responses": {"200": json_body(ref("Realtime")), **site_errors(400, 401, 404, 429)},
    }},
    "/api/sites": {
        "get": {"summary": "Sites of your workspace, newest first (at most 50)", "tags": ["sites"],
                "security": SESSION,
                "parameters": [query("offset", {"type": "integer", "minimum": 0, "default": 0},
                                     description="skip this many (the next 50); beyond the spec")],
                "responses": {"200": json_body({"type": "array", "maxItems": 50, "items": ref("Site")}, headers={
                    "X-Total-Count": {"schema": {"type": "string"},
                                      "description": "how many sites the workspace has"}}),
                              **site_errors(400, 401)}},
        "post": {
            "summary": "Register a domain (normalized; the same domain again returns the same site)",
            "tags": ["sites"], "security": SESSION,
            "requestBody": {"required": True, "content": {
                "application/x-www-form-urlencoded": {"schema": ref("SiteIn")},
                "application/json": {"schema": ref("SiteIn")}}},
            "responses": {"200": json_body(ref("SiteCreated")), **site_errors(400, 401, 403, 409)},
        },
    },
    "/api/sites/{site_id}": {
        "patch": {
            "summary": "Change a site's settings: its time zone, where its dashboard's days begin",
            "tags": ["sites"], "security": SESSION,
            "parameters": [{"name": "site_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("SiteSettingsIn")}}},
            "responses": {"200": json_body(ref("Site")), **site_errors(400, 401, 403, 404, 413)},
        },
    },
    "/api/verify": {
        "get": {"summary": "The TXT record to publish at the domain apex", "tags": ["sites"],
                "security": SESSION, "parameters": [_SITE_Q],
                "responses": {"200": json_body(ref("Verification")), **site_errors(400, 401, 404)}},
        "post": {"summary": "Look the TXT record up over DNS-over-HTTPS and verify the site (409: another "
                            "workspace verified the domain; 429: past 10 checks a minute per account; 502: the "
                            "resolver could not be reached)",
                 "tags": ["sites"], "security": SESSION, "parameters": [_SITE_Q],
                 "responses": {"200": json_body(ref("Verification")),
                               **site_errors(400, 401, 403, 404, 409, 429, 502)}},
    },
}

_STR = {"type": "string"}
_ZONE = ref("TimeZone")
_URL = {"type": ["string", "null"], "maxLength": 2048}
SCHEMAS = {
    "SiteEventIn": {
        "type": "object", "required": ["s", "n"],
        "properties": {
            "s": {"type": "string", "minLength": 1, "maxLength": 255, "description": "site id"},
            "n": {"type": "string", "minLength": 1, "maxLength": 64,
                  "description": "event name: pageview, outbound, identify, engagement (with sd and e) or custom"},
            "u": {**_URL, "description": "full page URL"},
            "p": {**_URL, "description": "path including query"},
            "r": {**_URL, "description": "referrer URL"},
            "t": {"type": ["string", "null"], "maxLength": 512, "description": "page title"},
            "w": {"type": ["number", "null"], "description": "viewport width in pixels"},
            "props": {"description": "custom properties, any JSON"},
            "sid": {"type": ["string", "null"], "minLength": 1, "maxLength": 64,
                    "description": "session id; assigned server-side if omitted"},
            "visit": {"type": ["string", "null"], "enum": ["join", "new", None],
                      "description": "how sid relates to visits: join (a tracker's page-load id: continues the "
                                     "visitor's open visit), new (an id made by reset()); omitted: sid is "
                                     "exactly the session id"},
            "v": {"type": ["string", "null"], "description": "tracker version (not stored)"},
            "ts": {"type": ["number", "null"], "description": "client time in ms (not stored)"},
            "sd": {"type": ["integer", "null"], "minimum": 0,
                   "description": "engagement: how far the page was scrolled, in percent (above 100 stored as 100)"},
            "e": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_ENGAGED_MS,
                  "description": "engagement: ms the page was visible and focused"},
        },
        # An engagement event reports on a page seen (Plausible's): it carries both numbers.
        "if": {"required": ["n"], "properties": {"n": {"const": "engagement"}}},
        "then": {"required": ["sd", "e"]},
    },
    "Realtime": {
        "type": "object",
        "required": ["activeVisitors", "pageviewsPerMinute", "eventsPerMinute", "topActivePages", "recentEvents"],
        "properties": {
            "activeVisitors": {"type": "integer", "description": "distinct sessions with an event in the window"},
            "pageviewsPerMinute": {"type": "number"},
            "eventsPerMinute": {"type": "number"},
            "topActivePages": {"type": "array", "maxItems": 10, "items": {
                "type": "object", "required": ["key", "count"],
                "properties": {"key": _STR, "count": {"type": "integer"}}}},
            "recentEvents": {"type": "array", "maxItems": 20, "items": {
                "type": "object", "required": ["id", "name", "path", "country", "timestamp"],
                "properties": {"id": _STR, "name": _STR, "path": {"type": ["string", "null"]},
                               "country": {"type": ["string", "null"]},
                               "timestamp": {"type": "string", "format": "date-time"}}}},
        },
    },
    "Site": {
        "type": "object", "required": ["id", "domain", "status", "verified", "verifiedAt", "createdAt", "timezone"],
        "properties": {
            "id": _STR, "domain": _STR, "status": {"type": "string", "enum": ["pending", "verified"]},
            "verified": {"type": "boolean"},
            "verifiedAt": {"type": ["string", "null"], "format": "date-time"},
            "createdAt": {"type": "string", "format": "date-time"},
            "timezone": _ZONE,
        },
    },
    "SiteIn": {"type": "object", "required": ["domain"], "description": "timezone: UTC when not given",
               "properties": {"domain": _STR, "timezone": _ZONE}},
    "SiteCreated": {"type": "object", "required": ["id", "domain", "timezone"],
                    "properties": {"id": _STR, "domain": _STR, "timezone": _ZONE}},
    "TimeZone": {"type": "string", "enum": sorted(ZONES), "description": (
        "an IANA time zone name: the site's days begin at its midnight, and its hours and labels are its own")},
    "SiteSettingsIn": {"type": "object", "required": ["timezone"], "additionalProperties": False,
                       "properties": {"timezone": _ZONE}},
    "Verification": {
        "type": "object", "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["pending", "verified", "not_found"]},
            "record": {"type": "string", "description": "tally-verify=<token>, to publish as TXT at the apex"},
            "domain": _STR,
        },
    },
}
