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
        "patch": {"summary": "Rename a shared link, or set, change or (null) remove its password: a new password "
                           "ends the access the earlier one gave",
                  "tags": _TAGS, "security": SESSION,
                  "requestBody": {"required": False,
                                  "content": {"application/json": {"schema": ref("SharedLinkPatch")}}},
                  "responses": {"200": json_body(ref("SharedLink"), headers=_NO_STORE),
                                **site_errors(400, 401, 403, 404, 413)}},
        "delete": {"summary": "Revoke a shared link: its URL and token answer 404 from the next request on",
                   "tags": _TAGS, "security": SESSION,
                   "responses": {"200": json_body(ref("Deleted")), **site_errors(401, 403, 404)}},
    },
    "/share/{token}": {"parameters": [path_param("token")], "get": {
        "summary": "A shared link's page: the site's overview, read-only, no sign-in (noindex, no-store, no "
                   "referrer); for a link with a password, its password form until the link's access cookie is set",
        "responses": {"200": {"description": "HTML page", "content": {"text/html": {"schema": {"type": "string"}}}},
                      "404": {"description": "unknown or revoked link",
                              "content": {"text/html": {"schema": {"type": "string"}}}}},
    }, "post": {
        "summary": "The password form of a link with a password: the right one sets the link's access cookie",
        "requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": {
            "type": "object", "properties": {"password": {"type": "string"}}}}}},
        "responses": {"303": {"description": "to the page, with the access cookie (HttpOnly, SameSite=Lax, 30 days)"},
                      "401": {"description": "wrong password: the form again",
                              "content": {"text/html": {"schema": {"type": "string"}}}},
                      "404": {"description": "unknown or revoked link",
                              "content": {"text/html": {"schema": {"type": "string"}}}},
                      **site_errors(413, 429)},
    }},
}

SCHEMAS = {
    "SharedLinkIn": {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": "string", "maxLength": 64, "description": "default `Shared link`"},
        "password": {"type": "string", "minLength": 8, "maxLength": 128,
                     "description": "asked on the link's page before it shows anything (stored as an argon2 hash)"}}},
    "SharedLinkPatch": {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": ["string", "null"], "maxLength": 64, "description": "null or blank: `Shared link`"},
        "password": {"type": ["string", "null"], "minLength": 8, "maxLength": 128,
                     "description": "a new password, or null to remove it; absent: unchanged"}}},
    "SharedLink": {"type": "object", "required": ["id", "name", "url", "protected", "createdAt"], "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "protected": {"type": "boolean"},
        "url": {"type": "string", "description": "{base}/share/<token>; the token is the only secret"},
        "createdAt": {"type": "string", "format": "date-time"}}},
}
