"""Health, metrics, dashboard sign-in, and the keyed events / identify / users endpoints."""

from __future__ import annotations

from app.openapi.common import (
    KEYED,
    RATE_HEADERS,
    SESSION,
    json_body,
    keyed_errors,
    path_param,
    query,
    ref,
    site_errors,
)

_JSON_OBJ = {"type": "object", "additionalProperties": True}
_JSON_OBJ_OR_NULL = {"type": ["object", "null"], "additionalProperties": True, "description": "null means none"}
_TS = {"type": "string", "format": "date-time"}
_ID = {"type": "string", "minLength": 1, "maxLength": 255}


def _page(item: str) -> dict:
    return {
        "type": "object", "required": ["data", "next_cursor", "has_more"],
        "properties": {"data": {"type": "array", "items": ref(item)}, "next_cursor": ref("Cursor"),
                       "has_more": {"type": "boolean"}},
    }


# app/idempotency.py: 1-255 printable ASCII characters (spaces around a header value are not part of it).
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]([ -~]*[!-~])?$"},
    "description": "Makes retries safe: a request with a key this workspace and environment (live or test) "
                   "used in the last 48 hours stores nothing and is answered as the first one was (same `id` "
                   "and `received_at`, or the same counts), with `Idempotent-Replayed: true`; one still being "
                   "committed is waited for. The same key with another body (or the other endpoint) is a 409 "
                   "`idempotency_conflict`. A request that failed (4xx, 5xx) keeps no key.",
}
_REPLAYED = {**RATE_HEADERS, "Idempotent-Replayed": {
    "schema": {"type": "string", "enum": ["true"]},
    "description": "present on the answer to a retry with an Idempotency-Key: the first request's answer"}}
_LIMIT_1000 = query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100})
_CURSOR = query("cursor", {"type": "string"})

PATHS = {
    "/healthz": {"get": {"summary": "Liveness", "responses": {"200": json_body(_JSON_OBJ)}}},
    "/readyz": {"get": {"summary": "Readiness (database reachable, ingestion committing)",
                        "responses": {"200": json_body(_JSON_OBJ), "503": json_body(_JSON_OBJ, "not ready")}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
        "200": {"description": "text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": json_body(_JSON_OBJ)}}},
    "/v1/events": {
        "post": {
            "summary": "Track one event", "security": KEYED, "parameters": [_IDEMPOTENCY_KEY],
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("EventIn")}}},
            "responses": {"200": json_body(ref("EventAccepted"), headers=_REPLAYED),
                          **keyed_errors(400, 401, 403, 409, 413, 429, 500, 503)},
        },
        "get": {
            "summary": "List events, newest first", "security": KEYED,
            "parameters": [query("event", {"type": "string"}), query("user_id", {"type": "string"}),
                           query("anonymous_id", {"type": "string"}, description=(
                               "events sent with this anonymous_id (identified ones too); not in the spec")),
                           query("from", _TS), query("to", _TS), _LIMIT_1000, _CURSOR],
            "responses": {"200": json_body(_page("Event"), headers=RATE_HEADERS),
                          **keyed_errors(400, 401, 403, 429)},
        },
    },
    "/v1/events/batch": {"post": {
        "summary": "Track up to 1,000 events", "security": KEYED, "parameters": [_IDEMPOTENCY_KEY],
        "description": "Each item is a single event's body, with its 64 KB limit: a larger item fails alone "
                       "(`payload_too_large` in `errors`); the whole body may be 8 MB.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["events"],
            "properties": {"events": {"type": "array", "maxItems": 1000, "items": ref("EventIn")}}}}}},
        "responses": {"200": json_body(ref("BatchAccepted"), headers=_REPLAYED),
                      **keyed_errors(400, 401, 403, 409, 413, 429, 500, 503)},
    }},
    "/v1/identify": {"post": {
        "summary": "Identify a user and merge traits",
        "description": "With `Authorization: Bearer <Tally key>` this is Tally's identify (below). With HTTP Basic "
                       "(a Segment write key) or `writeKey` in the body it is Segment's identify call: see "
                       "POST /v1/track for its shapes.",
        "security": [*KEYED, {"segmentWriteKey": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("IdentifyIn")}}},
        # Segment's call answers in Segment's shapes (app.openapi.segment), Tally's in the keyed API's.
        "responses": {"200": json_body({"anyOf": [ref("Identified"), ref("SegmentAccepted")]}, headers=RATE_HEADERS),
                      **{str(s): json_body({"anyOf": [ref("KeyedError"), ref("SegmentError")]}, "error", RATE_HEADERS)
                         for s in (400, 401, 403, 413, 429, 500, 503)}},
    }},
    "/v1/users": {"get": {
        "summary": "List user profiles; trait[<key>]=value filters by equality", "security": KEYED,
        "parameters": [_LIMIT_1000, _CURSOR],
        "responses": {"200": json_body(_page("UserProfile"), headers=RATE_HEADERS), **keyed_errors(400, 401, 403, 429)},
    }},
    "/v1/users/{user_id}": {
        "parameters": [path_param("user_id")],
        "get": {"summary": "One user profile", "security": KEYED,
                "responses": {"200": json_body(ref("UserProfile"), headers=RATE_HEADERS),
                              **keyed_errors(401, 403, 404, 429)}},
        "delete": {"summary": "Erase a user and all their events (right to erasure)", "security": KEYED,
                   "responses": {"204": {"description": "erased", "headers": RATE_HEADERS},
                                 **keyed_errors(401, 403, 429)}},
    },
    "/api/auth/login": {"post": {
        "summary": "Sign in to the dashboard (sets a new session cookie); answers the account as /api/auth/me does",
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("Credentials")}}},
        "responses": {"200": json_body(_JSON_OBJ), **site_errors(400, 401, 403, 415, 429)},
    }},
    "/api/auth/logout": {"post": {"summary": "Sign out", "responses": {"200": json_body(_JSON_OBJ)}}},
    "/api/auth/me": {"get": {"summary": "The signed-in account", "security": SESSION,
                             "responses": {"200": json_body(_JSON_OBJ), **site_errors(401)}}},
}

SCHEMAS = {
    "EventIn": {
        "type": "object", "required": ["event"],
        "properties": {
            "event": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "minLength": 1, "maxLength": 128},
            "user_id": _ID, "anonymous_id": _ID, "properties": _JSON_OBJ_OR_NULL, "timestamp": _TS,
        },
    },
    "EventAccepted": {"type": "object", "required": ["id", "status", "received_at"], "properties": {
        "id": {"type": "string"}, "status": {"const": "received"}, "received_at": _TS}},
    "BatchAccepted": {"type": "object", "required": ["received", "failed"], "properties": {
        "received": {"type": "integer"}, "failed": {"type": "integer"},
        "errors": {"type": "array", "items": {"type": "object", "required": ["index", "code", "message"],
                   "properties": {"index": {"type": "integer"}, "code": {"type": "string"},
                                  "message": {"type": "string"}}}}}},
    "Event": {"type": "object", "required": ["id", "event", "user_id", "properties", "timestamp"], "properties": {
        "id": {"type": "string"}, "event": {"type": "string"}, "user_id": {"type": ["string", "null"]},
        "anonymous_id": {"type": ["string", "null"]}, "properties": _JSON_OBJ, "timestamp": _TS,
        "received_at": _TS}},
    "IdentifyIn": {"type": "object", "required": ["user_id"], "properties": {
        "user_id": _ID, "traits": _JSON_OBJ_OR_NULL, "timestamp": _TS,
        "anonymous_id": {**_ID, "description": "the id events were sent under before the user was known: "
                                               "its events and profile merge into the user's (as an alias)"}}},
    "Identified": {"type": "object", "required": ["id", "status", "received_at"], "properties": {
        "id": {"type": "string"}, "status": {"const": "identified"}, "received_at": _TS}},
    "UserProfile": {"type": "object", "required": ["id", "traits", "created_at", "last_seen_at", "event_count"],
                    "properties": {"id": {"type": "string"}, "traits": _JSON_OBJ, "created_at": _TS,
                                   "last_seen_at": {"type": ["string", "null"], "format": "date-time"},
                                   "event_count": {"type": "integer"}}},
    "Credentials": {"type": "object", "required": ["email", "password"], "properties": {
        "email": {"type": "string"}, "password": {"type": "string"}}},
}
