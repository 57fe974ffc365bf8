"""Saved reports (/v1/reports). Request schemas come from the msgspec Structs that validate them."""

from __future__ import annotations

import msgspec

from app.openapi.common import KEYED, RATE_HEADERS, ecma_patterns, json_body, keyed_errors, path_param, query, ref
from app.reports.config import (
    CustomConfig,
    EventVolumeConfig,
    FunnelConfig,
    ReportIn,
    ReportPatch,
    RetentionConfig,
    Schedule,
)

_STRUCTS = (ReportIn, ReportPatch, Schedule, EventVolumeConfig, FunnelConfig, RetentionConfig, CustomConfig)
_, _GENERATED = ecma_patterns(msgspec.json.schema_components(_STRUCTS, ref_template="#/components/schemas/{name}"))
_TS = {"type": "string", "format": "date-time"}
_NULL_TS = {"type": ["string", "null"], "format": "date-time"}
_ID = path_param("id")

_CONFIG_DOC = (
    "Validated per type: event_volume → EventVolumeConfig, funnel → FunnelConfig, retention → RetentionConfig, "
    "custom (enterprise plan) → CustomConfig. group_by is 'properties.<key>' (event property, dots nest), "
    "'traits.<key>' (user trait) or a bare property name; a grouped event_volume or funnel keeps config.group_limit "
    "groups (default 50, max 1000), the largest (event_volume by count, funnel by users entering step 1), the rest "
    "summed into \"(other)\". Without from/to a run covers the 30 days before now."
)

SCHEMAS = {
    **_GENERATED,
    # Retention's two forms, as RetentionConfig.__post_init__ takes them: events, or start_event and return_event.
    "RetentionConfig": {**_GENERATED["RetentionConfig"], "oneOf": [
        {"required": ["events"], "not": {"anyOf": [{"required": ["start_event"]}, {"required": ["return_event"]}]}},
        {"required": ["start_event", "return_event"], "not": {"required": ["events"]}}]},
    # The config's schema follows the type (a client generated from the document sends each type's own fields).
    "ReportIn": {**_GENERATED["ReportIn"], "description": _CONFIG_DOC, "allOf": [
        {"if": {"required": ["type"], "properties": {"type": {"const": kind}}},
         "then": {"properties": {"config": ref(config.__name__)}}}
        for kind, config in (("event_volume", EventVolumeConfig), ("funnel", FunnelConfig),
                             ("retention", RetentionConfig), ("custom", CustomConfig))]},
    "Report": {
        "type": "object", "required": ["id", "name", "type", "config", "schedule", "created_at", "last_run_at"],
        "properties": {
            "id": {"type": "string", "pattern": "^rpt_"}, "name": {"type": "string"},
            "type": {"enum": ["event_volume", "funnel", "retention", "custom"]},
            "config": {"type": "object"}, "schedule": {"anyOf": [ref("Schedule"), {"type": "null"}]},
            "created_at": _TS, "last_run_at": _NULL_TS,
        },
    },
    "ReportSummary": {
        "type": "object", "required": ["id", "name", "type", "created_at", "last_run_at"],
        "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "type": {"type": "string"},
                       "created_at": _TS, "last_run_at": _NULL_TS},
    },
    "ReportResult": {
        "type": "object", "required": ["columns", "rows", "generated_at"],
        "properties": {
            "columns": {"type": "array", "items": {"type": "string"}},
            "rows": {"type": "array", "items": {"type": "array"}},
            "generated_at": _TS,
            "truncated": {"type": "boolean", "description": "custom SQL only: the 10,000-row cap cut the result"},
            "other_groups": {"type": "integer", "minimum": 0, "description": (
                "event_volume and funnel with group_by only: how many group values past config.group_limit (the "
                "largest kept: by count, for a funnel by users entering step 1) were summed into the group named "
                "\"(other)\"; 0 when every group is shown")},
        },
    },
}


def _body(name: str) -> dict:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


PATHS = {
    "/v1/reports": {
        "post": {"summary": "Create a report (scope write; with a schedule also read)", "security": KEYED,
                 "requestBody": _body("ReportIn"),
                 "responses": {"201": json_body(ref("Report"), "created", RATE_HEADERS),
                               **keyed_errors(400, 401, 403, 413, 429)}},
        "get": {"summary": "List reports, newest first (scope read)", "security": KEYED,
                "parameters": [query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
                               query("cursor", {"type": "string"})],
                "responses": {"200": json_body({
                    "type": "object", "required": ["data", "next_cursor", "has_more"],
                    "properties": {"data": {"type": "array", "items": ref("ReportSummary")},
                                   "next_cursor": ref("Cursor"), "has_more": {"type": "boolean"}}},
                    headers=RATE_HEADERS), **keyed_errors(400, 401, 403, 429)}},
    },
    "/v1/reports/{id}": {
        "parameters": [_ID],
        "get": {"summary": "Get a report (scope read)", "security": KEYED,
                "responses": {"200": json_body(ref("Report"), headers=RATE_HEADERS),
                              **keyed_errors(401, 403, 404, 429)}},
        "patch": {"summary": "Change a report; fields present replace, schedule null removes it (scope write)",
                  "security": KEYED, "requestBody": _body("ReportPatch"),
                  "responses": {"200": json_body(ref("Report"), headers=RATE_HEADERS),
                                **keyed_errors(400, 401, 403, 404, 429)}},
        "delete": {"summary": "Delete a report (scope write)", "security": KEYED,
                   "responses": {"204": {"description": "deleted", "headers": RATE_HEADERS},
                                 **keyed_errors(401, 403, 404, 429)}},
    },
    "/v1/reports/{id}/run": {
        "parameters": [_ID],
        "get": {"summary": "Run a report now (scope read)", "security": KEYED,
                "description": "504 report_timeout past the configured timeout; 400 invalid_sql when custom SQL "
                               "fails; 403 plan_required for custom SQL outside the enterprise plan; 413 "
                               "result_too_large past TALLY_CUSTOM_SQL_MAX_BYTES; 429 reports_busy (with Retry-After) "
                               "when the workspace already runs all but one of the report connections' worth "
                               "of reports; 503 reports_busy (with Retry-After) when every report connection "
                               "stayed busy; 503 unavailable (with Retry-After) when waiting for the analytics "
                               "store to mirror the events committed before the run took the whole timeout (a "
                               "backlog after an upgrade or an outage), or when PostgreSQL stopped answering "
                               "(custom SQL, or a trait's users, not read 5 s past PostgreSQL's timeout).",
                "responses": {"200": json_body(ref("ReportResult"), headers=RATE_HEADERS),
                              **keyed_errors(400, 401, 403, 404, 413, 429, 503, 504)}},
    },
}
