"""The Segment HTTP Tracking API (app.views.segment); POST /v1/identify is documented in core."""

from __future__ import annotations

from app.openapi.common import RATE_HEADERS, json_body, ref

_OBJ = {"type": "object", "additionalProperties": True}
_TS = {"type": "string", "format": "date-time"}
_IDENT = {"type": ["string", "number"]}
_SECURITY = [{"segmentWriteKey": []}]
_ERRORS = {str(s): json_body(ref("SegmentError"), "error", RATE_HEADERS) for s in (400, 401, 403, 429, 500, 503)}

_KINDS = {
    "track": "Track an event (stored snake_case: \"Order Completed\" -> order_completed)",
    "page": "A page view: event page_viewed with name and category in properties",
    "screen": "A screen view: event screen_viewed with name and category in properties",
    "group": "Put the user in a group: profile trait `group` = {id: groupId, ...traits}",
    "alias": "Merge previousId's profile and events into userId",
}
_SHORT = {"t": "track", "i": "identify", "p": "page", "s": "screen", "g": "group", "a": "alias"}


# What each call needs besides the message's shape, as app.segment.messages.to_op refuses it without.
_USER = {"anyOf": [{"required": ["userId"]}, {"required": ["anonymousId"]}]}
_NEEDS = {"track": [_USER, {"required": ["event"], "properties": {"event": {"minLength": 1}}}],
          "identify": [_USER], "page": [_USER], "screen": [_USER], "group": [_USER, {"required": ["groupId"]}],
          "alias": [{"required": ["previousId", "userId"]}]}


def _call(kind: str, summary: str) -> dict:
    return {"post": {
        "summary": summary, "security": _SECURITY,
        "description": "Segment's field names; 32 KB per call. Authenticate with HTTP Basic (write key as the "
                       "user name) or writeKey in the body. messageId makes retries idempotent (48 h).",
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"allOf": [ref("SegmentMessage"), *_NEEDS[kind]]}}}},
        "responses": {"200": json_body(ref("SegmentAccepted"), headers=RATE_HEADERS), **_ERRORS},
    }}


PATHS = {f"/v1/{kind}": _call(kind, summary) for kind, summary in _KINDS.items()}
PATHS.update({f"/v1/{short}": _call(kind, f"Short form of /v1/{kind} (analytics.js)")
              for short, kind in _SHORT.items()})
PATHS["/v1/batch"] = {"post": {
    "summary": "Several Segment calls at once (500 KB, 32 KB per message)", "security": _SECURITY,
    "description": "Valid messages are stored even when others fail; failures are listed by index.",
    "requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": ["batch"],
        "properties": {"batch": {"type": "array", "items": ref("SegmentMessage")}, "sentAt": _TS,
                       "writeKey": {"type": "string"}, "context": _OBJ, "integrations": _OBJ}}}}},
    "responses": {"200": json_body(ref("SegmentAccepted"), headers=RATE_HEADERS), **_ERRORS},
}}
# Segment's import endpoint: the batch call, where analytics-ruby (/v1/import) and analytics-java
# (/v1/import/) send their batches; analytics.js's batching mode posts it to /v1/b.
for _path in ("/v1/import", "/v1/import/"):
    PATHS[_path] = {"post": {**PATHS["/v1/batch"]["post"],
                             "summary": "The batch call under Segment's import path (analytics-ruby, analytics-java)"}}
PATHS["/v1/b"] = {"post": {**PATHS["/v1/batch"]["post"], "summary": "The batch call (analytics.js's batching mode)"}}

_CORS = {"Access-Control-Allow-Origin": {"schema": {"type": "string"}, "description": "the request's Origin"}}
PATHS["/v1/identify"] = {}  # its POST is in app.openapi.core; the fragments are merged per method
for _item in PATHS.values():
    _item["options"] = {
        "summary": "CORS preflight for analytics.js in a browser: any origin (cached 24 hours)",
        "responses": {"204": {"description": "allowed", "headers": {
            **_CORS, "Access-Control-Allow-Methods": {"schema": {"type": "string"}},
            "Access-Control-Allow-Headers": {"schema": {"type": "string"}},
            "Access-Control-Max-Age": {"schema": {"type": "string", "const": "86400"}}}}},
    }
PATHS["/v1/projects/{write_key}/settings"] = {"get": {
    "summary": "analytics.js's settings, for `cdnURL` pointed at this service",
    "description": "Names this service as analytics.js's one destination and turns off its telemetry to Segment.",
    "parameters": [{"name": "write_key", "in": "path", "required": True, "schema": {"type": "string"}}],
    "responses": {"200": json_body({"type": "object", "required": ["integrations"], "properties": {
        "integrations": _OBJ, "metrics": _OBJ}}, headers=RATE_HEADERS),
        **{s: _ERRORS[s] for s in ("401", "403", "429")}},
}}

SCHEMAS = {
    "SegmentMessage": {"type": "object", "additionalProperties": True, "properties": {
        "type": {"type": "string", "enum": ["track", "identify", "page", "screen", "group", "alias"],
                 "description": "in /v1/batch items; elsewhere the path gives the type"},
        "userId": _IDENT, "anonymousId": _IDENT, "event": {"type": "string"}, "name": {"type": "string"},
        "category": {"type": "string"}, "properties": _OBJ, "traits": _OBJ, "context": _OBJ,
        "timestamp": _TS, "sentAt": _TS, "messageId": {"type": "string", "maxLength": 255},
        "integrations": _OBJ, "groupId": _IDENT, "previousId": _IDENT, "writeKey": {"type": "string"}}},
    "SegmentAccepted": {"type": "object", "required": ["success"], "properties": {
        "success": {"const": True}, "received": {"type": "integer"}, "failed": {"type": "integer"},
        "errors": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer"}, "code": {"type": "string"}, "message": {"type": "string"}}}}}},
    "SegmentError": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}}},
}
