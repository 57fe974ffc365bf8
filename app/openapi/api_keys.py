"""Dashboard API-key management (session cookie): /api/keys."""

from __future__ import annotations

from app.openapi.common import SESSION, json_body, path_param, ref, site_errors

_TS = {"type": ["string", "null"], "format": "date-time"}
_SCOPES = {"type": "array", "minItems": 1, "items": {"type": "string", "enum": ["read", "write", "admin"]}}

PATHS = {
    "/api/keys": {
        "get": {
            "summary": "List the workspace's API keys (never their values), newest first", "security": SESSION,
            "responses": {"200": json_body({"type": "object", "required": ["keys"], "properties": {
                "keys": {"type": "array", "items": ref("ApiKey")}}}), **site_errors(401)},
        },
        "post": {
            "summary": "Create an API key; the response carries its value, shown only this once", "security": SESSION,
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ApiKeyIn")}}},
            "responses": {"201": json_body(ref("ApiKeyCreated"), "created"), **site_errors(400, 401, 413, 415)},
        },
    },
    "/api/keys/{key_id}": {
        "delete": {
            "summary": "Revoke an API key of the workspace", "security": SESSION,
            "parameters": [path_param("key_id")],
            "responses": {"200": json_body(ref("ApiKey"), "revoked"), **site_errors(401, 404)},
        },
    },
}

_KEY_PROPS = {
    "id": {"type": "string"}, "name": {"type": "string"}, "env": {"type": "string", "enum": ["live", "test"]},
    "scopes": _SCOPES, "prefix": {"type": "string", "description": "first characters of the key, to recognise it"},
    "status": {"type": "string", "enum": ["active", "expired", "revoked"]},
    "createdAt": {"type": "string", "format": "date-time"}, "expiresAt": _TS, "revokedAt": _TS,
}

SCHEMAS = {
    "ApiKeyIn": {
        "type": "object", "required": ["name", "scopes"], "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 64}, "scopes": _SCOPES,
            "test": {"type": "boolean", "default": False, "description": "a tally_test_ key for the test environment"},
            "expiresAt": {"type": ["string", "null"], "format": "date-time"},
        },
    },
    "ApiKey": {"type": "object", "required": list(_KEY_PROPS), "properties": _KEY_PROPS},
    "ApiKeyCreated": {
        "type": "object", "required": [*_KEY_PROPS, "key"],
        "properties": {**_KEY_PROPS, "key": {"type": "string", "description": "the key value; not retrievable later"}},
    },
}
