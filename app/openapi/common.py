"""Shared pieces: error shapes, rate-limit headers, helpers for fragments."""

from __future__ import annotations

from typing import Any


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


RATE_HEADERS = {
    "X-RateLimit-Limit": {"schema": {"type": "integer"}},
    "X-RateLimit-Remaining": {"schema": {"type": "integer"}},
    "X-RateLimit-Reset": {"schema": {"type": "integer"}},
}


def json_body(schema: dict, description: str = "OK", headers: dict | None = None) -> dict:
    out = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


def keyed_errors(*statuses: int) -> dict:
    """Keyed-API error responses ({"error": {"code", "message"}}) for the given statuses."""
    return {str(s): json_body(ref("KeyedError"), "error", RATE_HEADERS) for s in statuses}


def site_errors(*statuses: int) -> dict:
    """Site-API error responses ({"error": "..."}) for the given statuses."""
    return {str(s): json_body(ref("SiteError"), "error") for s in statuses}


def query(name: str, schema: dict, required: bool = False, description: str = "") -> dict:
    param = {"name": name, "in": "query", "required": required, "schema": schema}
    if description:
        param["description"] = description
    return param


def path_param(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}


KEYED = [{"apiKey": []}]
SESSION = [{"dashboardSession": []}]
# The reads a site's shared link may make take its token instead of the session (app/shared_access.py).
SHARE_AUTH = query("auth", {"type": "string"}, description=(
    "a shared link's token, instead of a session: reads that link's site only; an unknown or revoked token "
    "is a 404. Refused (403) on the event log, the export and every other /api route"))

PATHS: dict = {}
SCHEMAS = {
    "KeyedError": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object", "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }},
    },
    "SiteError": {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "string"}, "issues": {"type": "array"}},
    },
    "Cursor": {"type": ["string", "null"]},
}


def ecma_patterns(schema: Any) -> Any:
    """`schema` with each pattern's closing `\\Z` written `$`: the validators end patterns in `\\Z` (Python's `$`
    also matches before a final line break), JSON Schema's regexes are ECMA's, where `$` is the end and `\\Z` is
    no anchor."""
    if isinstance(schema, dict):
        return {k: (v[:-2] + "$" if k == "pattern" and isinstance(v, str) and v.endswith("\\Z") else ecma_patterns(v))
                for k, v in schema.items()}
    if isinstance(schema, list | tuple):
        return type(schema)(ecma_patterns(v) for v in schema)
    return schema
