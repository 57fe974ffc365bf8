"""Shared links of a site (/api/sites/{site_id}/shared-links) and the read-only page they open (/share/{token})."""

from __future__ import annotations

from app.openapi.common import SESSION, json_body, path_param, ref, site_errors

_TAGS = ["shared links"]
_NO_STORE = {"Cache-Control": {"schema": {"type": "string", "const": "no-store"}}}

PATHS = {
    "/api/sites/{site_id}/shared-links": {
        "parameters": [path_param("site_id")],
        "get": {"summary": "The site's shared links, oldest first, each with its URL", "tags": _TAGS,
                "security": SESSION,
                "responses": {"200": json_body({"type": "object", "required": ["links"], "properties": {
                    "links": {"type": "array", "items": ref("SharedLink")}}}, headers=_NO_STORE),
                    **site_errors(401, 404)}},
        "post": {"summary": "Create a shared link: its URL opens the site's overview read-only, without signing in",
                 "tags": _TAGS, "security": SESSION,
                 "requestBody": {"required": False, "content": {"application/json": {"schema": ref("SharedLinkIn")}}},
                 "responses": {"201": json_body(ref("SharedLink"), "created", headers=_NO_STORE),
                               **site_errors(400, 401, 403, 404, 409, 413)}},
    },
    "/api/sites/{site_id}/shared-links/{link_id}": {
        "parameters": [path_param("site_id"), path_param("link_id")],
        "delete": {"summary": "Revoke a shared link: its URL and token answer 404 from the next request on",
                   "tags": _TAGS, "security": SESSION,
                   "responses": {"200": json_body(ref("Deleted")), **site_errors(401, 403, 404)}},
    },
    "/share/{token}": {"get": {
        "summary": "A shared link's page: the site's overview, read-only, no sign-in (noindex, no-store, no referrer)",
        "parameters": [path_param("token")],
        "responses": {"200": {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}},
                      "404": {"description": "unknown or revoked link",
                              "content": {"text/html": {"schema": {"type": "string"}}}}},
    }},
}

SCHEMAS = {
    "SharedLinkIn": {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": "string", "maxLength": 64, "description": "default `Shared link`"}}},
    "SharedLink": {"type": "object", "required": ["id", "name", "url", "createdAt"], "properties": {
        "id": {"type": "string"}, "name": {"type": "string"},
        "url": {"type": "string", "description": "{base}/share/<token>; the token is the only secret"},
        "createdAt": {"type": "string", "format": "date-time"}}},
}
