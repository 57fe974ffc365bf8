"""/openapi.json documents exactly the operations the router serves."""

from aiohttp import web

from app.openapi import document
from app.server import init_app


def _router_operations(app: web.Application) -> set[tuple[str, str]]:
    ops = set()
    for route in app.router.routes():
        resource = route.resource
        if resource is None or isinstance(resource, web.StaticResource) or route.method in ("HEAD", "*"):
            continue
        ops.add((route.method.lower(), resource.canonical))
    return ops


def _documented_operations() -> set[tuple[str, str]]:
    methods = {"get", "post", "put", "patch", "delete", "options"}
    return {(m, path) for path, item in document()["paths"].items() for m in item if m in methods}


def test_document_matches_router(settings):
    served = _router_operations(init_app(settings))
    documented = _documented_operations()
    assert served - documented == set(), "served but not documented"
    assert documented - served == set(), "documented but not served"


async def test_served_document_is_openapi_31(client):
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["openapi"].startswith("3.1")
    assert "/v1/events" in doc["paths"]


def _patterns(node: object) -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items()
                for p in ([v] if k == "pattern" and isinstance(v, str) else _patterns(v))]
    return [p for v in node for p in _patterns(v)] if isinstance(node, list) else []


def test_patterns_are_ecma_regexes():
    """The validators end their patterns in Python's \\Z; JSON Schema's (ECMA) regexes have no \\Z anchor, so
    the document writes `$`, which is the end there."""
    patterns = _patterns(document())
    assert "^[a-z][a-z0-9_]*$" in patterns  # the event name, generated from the reports' Structs
    assert [p for p in patterns if "\\Z" in p] == []


async def test_event_ingestion_documents_its_idempotency_key(client):
    doc = await (await client.get("/openapi.json")).json()
    for path in ("/v1/events", "/v1/events/batch"):
        op = doc["paths"][path]["post"]
        header = [p for p in op["parameters"] if p["in"] == "header"]
        assert [p["name"] for p in header] == ["Idempotency-Key"] and not header[0]["required"]
        assert header[0]["schema"]["maxLength"] == 255
        assert "409" in op["responses"]
        assert "Idempotent-Replayed" in op["responses"]["200"]["headers"]
