"""Keyed data sources (/v1/data-sources…)."""

from __future__ import annotations

from app.openapi.common import KEYED, RATE_HEADERS, json_body, keyed_errors, path_param, query, ref
from app.sources.schemas import SOURCE_TYPES

_TS = {"type": "string", "format": "date-time"}
_TS_NULL = {"type": ["string", "null"], "format": "date-time"}
_STR = {"type": "string", "minLength": 1}
_STATUS = {"type": "string", "enum": ["testing", "active", "syncing", "error", "paused"]}
_ID = [path_param("id")]
_NO_CONTENT = {"description": "done; no body", "headers": RATE_HEADERS}


def _ok(schema: dict, description: str = "OK") -> dict:
    return json_body(schema, description, RATE_HEADERS)


def _op(summary: str, responses: dict, *, params: list | None = None, body: str | None = None) -> dict:
    op = {"summary": summary, "security": KEYED, "parameters": params or [], "responses": responses}
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
    return op


def _creds(required: list[str], props: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": required, "properties": props}


_SQL = _creds(["host", "database", "username", "password"], {
    "host": _STR, "port": {"type": "integer", "minimum": 1, "maximum": 65535},
    "database": _STR, "username": _STR, "password": {"type": "string"}})
# An access token, or an OAuth app's client id and secret with a refresh token (app.sources.schemas); Salesforce
# also needs the org's instance_url beside an access token.
_OAUTH_FIELDS = {k: _STR for k in ("access_token", "client_id", "client_secret", "refresh_token")}
_APP = {"required": ["client_id", "client_secret", "refresh_token"]}
# Each type's credentials (a key per SOURCE_TYPES), as app.sources.schemas.CREDENTIALS validates them.
_CREDENTIALS = {
    **dict.fromkeys(("postgres", "mysql", "redshift"), _SQL),
    "bigquery": _creds(["project_id", "dataset", "service_account_key"], {
        "project_id": _STR, "dataset": _STR, "service_account_key": {"type": "object"}}),
    "snowflake": _creds(["account", "warehouse", "database", "username", "password"], {
        k: _STR for k in ("account", "warehouse", "database", "username", "password")}),
    "stripe": _creds(["api_key"], {"api_key": {"type": "string", "pattern": "^(sk|rk)_(live|test)_[A-Za-z0-9]{4,}$"}}),
    "salesforce": {**_creds([], {**_OAUTH_FIELDS, "instance_url": {"type": "string", "format": "uri"}}),
                   "anyOf": [{"required": ["access_token", "instance_url"]}, _APP]},
    "hubspot": {**_creds([], _OAUTH_FIELDS), "anyOf": [{"required": ["access_token"]}, _APP]},
    "segment": _creds([], {"write_key": {
        "type": "string", "minLength": 8, "maxLength": 200, "pattern": "^[!-9;-~]+$",
        "description": "your existing Segment write key; omit it to have one generated (returned once in the "
                       "201). Only its SHA-256 is stored."}}),
}

PATHS = {
    "/v1/data-sources": {
        "get": _op("List data sources in creation order (scope read)", {
            "200": _ok(ref("DataSourceList")), **keyed_errors(400, 401, 403, 429)}, params=[
            query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
            query("cursor", {"type": "string"})]),
        "post": _op("Connect a data source; the connection check and first sync run in the background "
                    "(scope admin)", {
            "201": _ok(ref("DataSourceCreated"), "created, status testing"),
            **keyed_errors(400, 401, 403, 413, 429)}, body="DataSourceIn"),
    },
    "/v1/data-sources/{id}": {
        "get": _op("Get a data source with its status (scope read)", {
            "200": _ok(ref("DataSource")), **keyed_errors(401, 403, 404, 429)}, params=_ID),
        "delete": _op("Disconnect: stops syncs and forgets the credentials; imported data stays (scope admin)", {
            "204": _NO_CONTENT, **keyed_errors(401, 403, 404, 429)}, params=_ID),
    },
    "/v1/data-sources/{id}/pause": {
        "post": _op("Pause scheduled syncs (scope admin)", {
            "200": _ok(ref("DataSource")), **keyed_errors(401, 403, 404, 429)}, params=_ID),
    },
    "/v1/data-sources/{id}/resume": {
        "post": _op("Resume a paused source: active, next sync per schedule; testing (checked again) when "
                     "paused before its check passed (scope admin)", {
            "200": _ok(ref("DataSource")), **keyed_errors(401, 403, 404, 429)}, params=_ID),
    },
    "/v1/data-sources/{id}/sync": {
        "post": _op("Start a sync now (scope admin); 409 when paused, testing or already syncing; 429 "
                     "too_many_syncs when no sync slot is free for the workspace (nothing started)", {
            "202": _ok(ref("DataSource"), "sync started, status syncing"),
            **keyed_errors(401, 403, 404, 409, 429)}, params=_ID),
    },
}

SCHEMAS = {
    "DataSourceIn": {
        "type": "object", "required": ["name", "type", "credentials"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "\\S",
                     "description": "kept as sent; not blank"},
            "type": {"type": "string", "enum": list(SOURCE_TYPES)},
            "credentials": {
                "description": "Fields depend on type (see allOf); never returned or logged, stored encrypted.",
                "anyOf": list({id(c): c for c in _CREDENTIALS.values()}.values()),  # each shape once
            },
            "options": {
                "type": "object", "additionalProperties": False,
                "description": "table or query (SQL types, bigquery, snowflake; salesforce: an object or SOQL) "
                               "with an optional cursor_column for incremental sync (salesforce: SystemModstamp "
                               "by default); event_column or event_name; user_id_column (default user_id); "
                               "timestamp_column (default cursor_column); properties (property name -> column: "
                               "only these columns, renamed; default every other column); lookback_seconds (SQL "
                               "types with a date or date-time cursor_column: re-read that far before the last "
                               "value, skipping rows already imported); base_url overrides "
                               "the provider's API (or Salesforce login) host.",
                "properties": {
                    **{k: {"type": "string"} for k in (
                        "table", "query", "cursor_column", "timestamp_column", "event_column", "event_name",
                        "user_id_column", "base_url")},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                    "lookback_seconds": {"type": "integer", "minimum": 0, "maximum": 604800},
                },
            },
            "schedule": ref("DataSourceSchedule"),
        },
        "allOf": [{"if": {"required": ["type"], "properties": {"type": {"const": kind}}},
                   "then": {"properties": {"credentials": credentials}}} for kind, credentials in _CREDENTIALS.items()],
    },
    "DataSourceSchedule": {
        "type": "object", "additionalProperties": False,
        "description": "Default daily at 00:00 UTC. hourly runs on the hour; weekly runs on Mondays at time.",
        "properties": {
            "frequency": {"type": "string", "enum": ["hourly", "daily", "weekly"], "default": "daily"},
            "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$", "default": "00:00"},
        },
    },
    "DataSourceCreated": {
        "type": "object", "required": ["id", "name", "type", "status", "created_at"],
        "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "type": {"type": "string"},
                       "status": _STATUS, "created_at": _TS,
                       "write_key": {"type": "string", "description": "segment sources created without a write "
                                                                      "key: the generated one, shown only here"}},
    },
    "DataSource": {
        "type": "object",
        "required": ["id", "name", "type", "status", "status_reason", "last_synced_at", "schedule", "created_at"],
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "type": {"type": "string"}, "status": _STATUS,
            "status_reason": {"type": ["string", "null"], "description": "why the last check or sync failed"},
            "last_synced_at": _TS_NULL, "next_sync_at": _TS_NULL,
            "schedule": ref("DataSourceSchedule"), "options": {"type": "object"},
            "rows_imported": {"type": "integer"}, "created_at": _TS,
        },
    },
    "DataSourceList": {
        "type": "object", "required": ["data", "next_cursor", "has_more"],
        "properties": {"data": {"type": "array", "items": ref("DataSource")}, "next_cursor": ref("Cursor"),
                       "has_more": {"type": "boolean"}},
    },
}
