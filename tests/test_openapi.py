"""/openapi.json documents exactly the operations the router serves."""

import re

from aiohttp import web

from app.openapi import document
from app.server import init_app
from app.sources.schemas import SOURCE_TYPES
from tests.conftest import bearer
from tests.reports_support import set_plan
from tests.site_helpers import BROWSER_UA
from tests.test_segment_api import basic


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


async def _segment_source(client, make_key) -> dict:
    """A Segment source, whose write key (HTTP Basic) makes the Segment routes Segment's calls."""
    return await (await client.post("/v1/data-sources", headers=bearer(await make_key("admin")),
                                    json={"name": "seg", "type": "segment", "credentials": {}})).json()


def _described(doc: dict, schema: dict) -> list[set[str]]:
    """The required keys of each object shape a response schema allows (through $ref and anyOf)."""
    if "$ref" in schema:
        return _described(doc, doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    if "anyOf" in schema:
        return [keys for option in schema["anyOf"] for keys in _described(doc, option)]
    return [set(schema.get("required", []))]


async def test_identify_documents_the_segment_calls_answers_too(client, make_key):
    """POST /v1/identify with a Segment write key is Segment's identify: its answers are Segment's shapes,
    {"success": true} and {"code", "message"}, which the document gave only in the keyed API's shapes
    (found by schemathesis with the write key)."""
    doc = await (await client.get("/openapi.json")).json()
    responses = doc["paths"]["/v1/identify"]["post"]["responses"]
    source = await _segment_source(client, make_key)
    for headers, body, status in ((bearer(await make_key("write")), {"user_id": "u1"}, 200),
                                  (bearer(await make_key("write")), b"{nope", 400),
                                  (basic(source["write_key"]), {"userId": "u1", "traits": {}}, 200),
                                  (basic(source["write_key"]), b"{nope", 400)):
        kwargs = {"json": body} if isinstance(body, dict) else {"data": body}
        resp = await client.post("/v1/identify", headers={**headers, "Content-Type": "application/json"}, **kwargs)
        assert resp.status == status, await resp.text()
        answered = set(await resp.json())
        shapes = _described(doc, responses[str(status)]["content"]["application/json"]["schema"])
        assert any(required <= answered for required in shapes), (headers, answered, shapes)


async def test_the_plausible_event_documents_its_required_fields_under_either_name(client):
    """name, url and domain are required, each as its long or its short (tracker) name: the document said so
    only in words, so a client generated from it could send none (found by fuzzing /api/event from it)."""
    doc = await (await client.get("/openapi.json")).json()
    schema = doc["components"]["schemas"]["PlausibleEventIn"]
    required = [{tuple(option["required"]) for option in rule["anyOf"]} for rule in schema["allOf"] if "anyOf" in rule]
    assert required == [{("name",), ("n",)}, {("url",), ("u",)}, {("domain",), ("d",)}]
    assert {"n", "u", "d", "r", "p", "$", "i", "sd", "e"} <= set(schema["properties"])
    # An engagement event (under either name) requires its two numbers, as the server does.
    [engaged] = [rule for rule in schema["allOf"] if "if" in rule]
    assert [(o["required"], o["properties"]) for o in engaged["if"]["anyOf"]] == [
        (["name"], {"name": {"const": "engagement"}}), (["n"], {"n": {"const": "engagement"}})]
    assert engaged["then"] == {"required": ["sd", "e"]}
    full = {"name": "pageview", "url": "https://docs.example/a", "domain": "docs.example"}
    short = {"n": "pageview", "u": "https://docs.example/a", "d": "docs.example"}
    headers = {"User-Agent": BROWSER_UA, "Content-Type": "application/json"}
    for body in (full, short):
        assert (await client.post("/api/event", json=body, headers=headers)).status == 202
    for long, abbreviated in (("name", "n"), ("url", "u"), ("domain", "d")):
        for body in (full, short):
            lacking = {k: v for k, v in body.items() if k not in (long, abbreviated)}
            resp = await client.post("/api/event", json=lacking, headers=headers)
            assert resp.status == 400, lacking
            assert {"field": long, "message": "required"} in (await resp.json())["issues"]
    for body in (full, short):
        named = {**body, ("n" if "n" in body else "name"): "engagement"}
        resp = await client.post("/api/event", json=named, headers=headers)
        assert resp.status == 400 and [i["field"] for i in (await resp.json())["issues"]] == ["sd", "e"]
        assert (await client.post("/api/event", json={**named, "sd": 5, "e": 9}, headers=headers)).status == 202


async def test_a_reports_config_schema_follows_its_type(client, make_key, database_url, workspace):
    """ReportIn's config was any object: the document now gives each type's config schema, the one the server
    validates it with (a config lacking that schema's required field is refused naming it)."""
    key = bearer(await make_key("read,write"))
    await set_plan(database_url, workspace, "enterprise")  # custom SQL reports
    doc = await (await client.get("/openapi.json")).json()
    rules = {rule["if"]["properties"]["type"]["const"]: rule["then"]["properties"]["config"]["$ref"].rsplit("/", 1)[1]
             for rule in doc["components"]["schemas"]["ReportIn"]["allOf"]}
    assert rules == {"event_volume": "EventVolumeConfig", "funnel": "FunnelConfig", "retention": "RetentionConfig",
                     "custom": "CustomConfig"}
    named = {"event_volume": "events", "funnel": "events", "retention": "start_event", "custom": "sql"}
    for kind, component in rules.items():
        schema = doc["components"]["schemas"][component]
        required = {*schema.get("required", []), *(f for form in schema.get("oneOf", []) for f in form["required"])}
        resp = await client.post("/v1/reports", headers=key, json={"name": kind, "type": kind, "config": {}})
        assert resp.status == 400, kind
        assert [f["field"] for f in (await resp.json())["error"]["fields"]] == [f"config.{named[kind]}"]
        assert named[kind] in required, (kind, required)


async def test_a_data_sources_credentials_schema_follows_its_type(client, make_key):
    """DataSourceIn's credentials were one of several shapes, not tied to the type (a Segment source's optional
    write key was a required field there, HubSpot took Salesforce's instance_url): each type now has the shape
    app.sources.schemas validates. Empty credentials are refused exactly where that shape requires a field."""
    key = bearer(await make_key("admin"))
    doc = await (await client.get("/openapi.json")).json()
    shapes = {rule["if"]["properties"]["type"]["const"]: rule["then"]["properties"]["credentials"]
              for rule in doc["components"]["schemas"]["DataSourceIn"]["allOf"]}
    assert set(shapes) == set(SOURCE_TYPES)
    for kind, shape in shapes.items():
        resp = await client.post("/v1/data-sources", headers=key,
                                 json={"name": kind, "type": kind, "credentials": {}})
        requires = bool(shape["required"]) or "anyOf" in shape
        assert resp.status == (400 if requires else 201), (kind, await resp.text())
        if requires:
            assert (await resp.json())["error"]["fields"][0]["field"].startswith("credentials."), kind


async def test_each_segment_call_documents_what_it_needs(client, make_key):
    """Every Segment call shared one message schema, so a client generated from the document could send a track
    without its event or an alias without its ids. Each now requires what the server refuses a call without
    (one of userId or anonymousId; a track's event, a group's groupId, an alias's previousId and userId)."""
    source = await _segment_source(client, make_key)
    doc = await (await client.get("/openapi.json")).json()
    for kind, lacking, named in (("track", {}, "userId"), ("track", {"userId": "u"}, "event"),
                                 ("page", {}, "userId"), ("screen", {}, "userId"), ("group", {}, "userId"),
                                 ("group", {"userId": "u"}, "groupId"), ("alias", {"userId": "u"}, "previousId")):
        schema = doc["paths"][f"/v1/{kind}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        needs = [{*rule.get("required", []), *(f for alt in rule.get("anyOf", []) for f in alt["required"])}
                 for rule in schema["allOf"][1:]]
        assert any(named in fields for fields in needs), (kind, named, needs)
        resp = await client.post(f"/v1/{kind}", headers=basic(source["write_key"]), json=lacking)
        assert resp.status == 400, (kind, lacking)
        assert named in (await resp.json())["message"], (kind, await resp.text())
    complete = {"track": {"userId": "u", "event": "Signed Up"}, "group": {"anonymousId": "a", "groupId": "g"},
                "alias": {"previousId": "a", "userId": "u"}, "page": {"anonymousId": "a"}}
    for kind, body in complete.items():
        resp = await client.post(f"/v1/{kind}", headers=basic(source["write_key"]), json=body)
        assert resp.status == 200, (kind, await resp.text())


def _operation(link: dict) -> tuple[str, str]:
    """The path and method a link's operationRef (#/paths/<JSON pointer>/<method>) names."""
    pointer, method = link["operationRef"].removeprefix("#/paths/").rsplit("/", 1)
    return pointer.replace("~1", "/").replace("~0", "~"), method


async def test_a_created_things_id_links_to_the_operations_on_it(client, make_key):
    """Each POST that answers a created thing's id links to the operations on it (OpenAPI links: what a client
    calls next, and what schemathesis's stateful phase follows). Every link names an operation of the document
    and exactly its path parameters, under a name the specification allows; following one works."""
    doc = await (await client.get("/openapi.json")).json()
    linked = {}
    for path, item in doc["paths"].items():
        for answer in item.get("post", {}).get("responses", {}).values():
            for name, link in answer.get("links", {}).items():
                assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
                target, method = _operation(link)
                assert method in doc["paths"][target], link
                assert set(link["parameters"]) == set(re.findall(r"{(\w+)}", target)), link
                linked.setdefault(path, set()).add((method, target))
    assert ("get", "/v1/reports/{id}/run") in linked["/v1/reports"]
    assert ("delete", "/api/sites/{site_id}/goals/{goal_id}") in linked["/api/sites/{site_id}/goals"]
    assert ("delete", "/api/keys/{key_id}") in linked["/api/keys"]
    # Following one: the link's expressions evaluated on a real POST, then the operation it names called.
    key = bearer(await make_key("read,write"))
    created = await (await client.post("/v1/reports", headers=key, json={
        "name": "linked", "type": "event_volume", "config": {"events": ["signup"]}})).json()
    link = doc["paths"]["/v1/reports"]["post"]["responses"]["201"]["links"]["GET_v1_reports_id"]
    target, method = _operation(link)
    assert method == "get"
    for name, expression in link["parameters"].items():
        assert expression.startswith("$response.body#/")
        value = created
        for step in expression.removeprefix("$response.body#/").split("/"):
            value = value[step]
        target = target.replace(f"{{{name}}}", value)
    assert (await (await client.get(target, headers=key)).json())["name"] == "linked"
