"""The OpenAPI 3.1 document served at /openapi.json, assembled from one fragment per API area.

Each fragment module defines PATHS (OpenAPI path items) and SCHEMAS (component schemas).
A test checks that the document and the router list the same operations.
"""

from __future__ import annotations

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

