"""The OpenAPI 3.1 document served at /openapi.json, assembled from one fragment per API area.

Each fragment module defines PATHS (OpenAPI path items) and SCHEMAS (component schemas).
A test checks that the document and the router list the same operations.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import import_module

FRAGMENTS = [
    "app.openapi.common",
    "app.openapi.core",
    "app.openapi.api_keys",
    "app.openapi.pages",
    "app.openapi.dashboards",
    "app.openapi.data_sources",
    "app.openapi.site_analytics",
    "app.openapi.site_ingest",
    "app.openapi.site_goals",
    "app.openapi.site_shared_links",
    "app.openapi.site_stats_api",
    "app.openapi.reports",
    "app.openapi.segment",
]


@cache
def document() -> dict:
    paths: dict = {}
    schemas: dict = {}
    for name in FRAGMENTS:
        module = import_module(name)
        for path, item in module.PATHS.items():
            paths.setdefault(path, {}).update(item)
        schemas.update(module.SCHEMAS)
    _unavailable_everywhere(paths)
    _link_created(paths, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Tally", "version": "1.0.0",
                 "description": "Keyed product-analytics API (/v1) and site analytics API (/api)."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "tally_live_sk_… or tally_test_sk_…"},
                "dashboardSession": {"type": "apiKey", "in": "cookie", "name": "tally_session"},
                "segmentWriteKey": {"type": "http", "scheme": "basic",
                                    "description": "Segment write key as the user name, empty password"},
            },
        },
    }


_METHODS = ("get", "post", "put", "patch", "delete")


def _unavailable_everywhere(paths: dict) -> None:
    """Any /v1 or /api operation may answer 503 while PostgreSQL or Redis is unreachable (app/outages.py)."""
    from app.openapi.common import json_body, ref

    retry = {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}}
    for path, item in paths.items():
        schema = "KeyedError" if path.startswith("/v1") else "SiteError" if path.startswith("/api") else None
        if schema is None:
            continue
        for method in _METHODS:
            if method in item:
                item[method].setdefault("responses", {}).setdefault(
                    "503", json_body(ref(schema), "a dependency (PostgreSQL, Redis) is unreachable", retry))



def _link_created(paths: dict, schemas: dict) -> None:
    """OpenAPI links from each POST that answers a created thing's `id` to the operations on that thing (the
    paths below it that name it in their next parameter and need no other new one): what a client (or
    schemathesis's stateful phase) calls next with the id it got. The path's own parameters are the request's."""
    for path, item in paths.items():
        post = item.get("post", {})
        for status in ("200", "201"):
            body = post.get("responses", {}).get(status, {}).get("content", {}).get("application/json")
            if body is None or "id" not in _resolved(body["schema"], schemas).get("properties", {}):
                continue
            own = re.findall(r"{(\w+)}", path)
            links = {}
            for below, operations in paths.items():
                names = re.findall(r"{(\w+)}", below[len(path):]) if below.startswith(path + "/{") else []
                if len(names) != 1:  # not below it, or it needs another id too (a chart of a created dashboard)
                    continue
                parameters = {name: f"$request.path.{name}" for name in own} | {names[0]: "$response.body#/id"}
                ref = "#/paths/" + below.replace("~", "~0").replace("/", "~1")
                # A link's name follows the components' naming rule ([A-Za-z0-9._-]+): GET_v1_reports_id.
                links.update({re.sub(r"[^A-Za-z0-9]+", "_", f"{method.upper()} {below}").strip("_"):
                              {"operationRef": f"{ref}/{method}", "parameters": parameters}
                              for method in _METHODS if method in operations})
            if links:
                post["responses"][status]["links"] = links


def _resolved(schema: dict, schemas: dict) -> dict:
    while "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    return schema
