"""Keyed dashboards and charts: list/get, create/change/delete, scopes, validation and isolation."""

import secrets

import asyncpg
import pytest

from tests.conftest import bearer

CHART = {"title": "Signups", "type": "line", "event": "signup",
         "filters": [{"property": "plan", "operator": "eq", "value": "pro"}], "group_by": "country"}


async def _create(client, key, **body):
    body.setdefault("name", "Growth")
    resp = await client.post("/v1/dashboards", headers=bearer(key), json=body)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def test_create_get_and_list(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key, name="Growth", description="weekly numbers",
                         charts=[CHART, {"title": "Plans", "type": "pie", "event": "signup", "group_by": "plan"}])
    assert made["id"].startswith("dsh_")
    assert made["name"] == "Growth" and made["description"] == "weekly numbers"
    assert made["public_url"] is None
    assert [c["type"] for c in made["charts"]] == ["line", "pie"]
    chart = made["charts"][0]
    assert chart["id"].startswith("chrt_")
    assert chart == {"id": chart["id"], "title": "Signups", "type": "line", "event": "signup",
                     "filters": [{"property": "plan", "operator": "eq", "value": "pro"}], "group_by": "country"}
    assert made["charts"][1]["filters"] == [] and made["charts"][1]["group_by"] == "plan"
    assert made["created_at"].endswith("Z") and made["updated_at"] == made["created_at"]

    got = await (await client.get(f"/v1/dashboards/{made['id']}", headers=bearer(key))).json()
    assert got == made

    resp = await client.get("/v1/dashboards", headers=bearer(key))
    assert resp.status == 200
    assert resp.headers["X-RateLimit-Limit"]
    body = await resp.json()
    assert body == {"data": [{"id": made["id"], "name": "Growth", "created_at": made["created_at"],
                              "updated_at": made["updated_at"], "chart_count": 2}],
                    "next_cursor": None, "has_more": False}


async def test_funnel_chart_keeps_its_steps(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key, charts=[
        {"title": "Checkout", "type": "funnel", "event": "view", "steps": ["cart", "buy"]}])
    assert made["charts"][0]["steps"] == ["cart", "buy"]
    assert made["charts"][0]["group_by"] is None


async def test_pagination_walks_every_dashboard_once(client, make_key):
    key = await make_key("read,write")
    made = [(await _create(client, key, name=f"d{i}"))["id"] for i in range(7)]
    seen, cursor, pages = [], None, 0
    while True:
        url = "/v1/dashboards?limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = await (await client.get(url, headers=bearer(key))).json()
        pages += 1
        seen += [d["id"] for d in body["data"]]
        assert body["has_more"] == (body["next_cursor"] is not None)
        if not body["has_more"]:
            break
        cursor = body["next_cursor"]
    assert pages == 3
    assert seen == sorted(made) and len(set(seen)) == 7
    assert [d["id"] for d in (await (await client.get("/v1/dashboards", headers=bearer(key))).json())["data"]] == seen


# Python's int() also reads "1_0", " 5", "+5" and other scripts' digits: a limit is ASCII digits alone.
@pytest.mark.parametrize("query", ["limit=0", "limit=201", "limit=x", "cursor=!!", "cursor=WzFd", "limit=1_0",
                                   "limit=%205", "limit=%2B5", "limit=%EF%BC%95", "limit=5%0A"])
async def test_bad_list_parameters(client, make_key, query):
    key = await make_key("read")
    resp = await client.get(f"/v1/dashboards?{query}", headers=bearer(key))
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"


async def test_limit_200_is_allowed(client, make_key):
    key = await make_key("read")
    assert (await client.get("/v1/dashboards?limit=200", headers=bearer(key))).status == 200


async def test_scopes(client, make_key):
    read, write, both = await make_key("read"), await make_key("write"), await make_key("read,write")
    made = await _create(client, both)
    dash = f"/v1/dashboards/{made['id']}"
    chart = f"{dash}/charts/{made['id']}"
    for method, path, body in [
        ("POST", "/v1/dashboards", {"name": "x"}), ("PATCH", dash, {"name": "y"}), ("DELETE", dash, None),
        ("POST", f"{dash}/charts", CHART), ("PATCH", chart, {"title": "t"}), ("DELETE", chart, None),
        ("POST", f"{dash}/share", None), ("DELETE", f"{dash}/share", None),
    ]:
        resp = await client.request(method, path, headers=bearer(read), json=body)
        assert resp.status == 403, (method, path)
        assert (await resp.json())["error"]["code"] == "forbidden"
    for path in ["/v1/dashboards", dash, f"{chart}/data"]:
        resp = await client.get(path, headers=bearer(write))
        assert resp.status == 403, path
    assert (await client.get("/v1/dashboards")).status == 401
    assert (await client.get(dash)).status == 401


async def test_other_workspace_and_env_see_404(client, make_key):
    owner = await make_key("read,write")
    made = await _create(client, owner, charts=[CHART])
    dash, chart = f"/v1/dashboards/{made['id']}", made["charts"][0]["id"]
    stranger = await make_key("read,write", workspace_name=f"ws-{secrets.token_hex(6)}")
    sandbox = await make_key("read,write", test=True)
    for key in (stranger, sandbox):
        assert (await (await client.get("/v1/dashboards", headers=bearer(key))).json())["data"] == []
        for method, path, body in [
            ("GET", dash, None), ("PATCH", dash, {"name": "y"}), ("DELETE", dash, None),
            ("POST", f"{dash}/charts", CHART), ("PATCH", f"{dash}/charts/{chart}", {"title": "t"}),
            ("DELETE", f"{dash}/charts/{chart}", None), ("GET", f"{dash}/charts/{chart}/data", None),
            ("POST", f"{dash}/share", None), ("DELETE", f"{dash}/share", None),
        ]:
            resp = await client.request(method, path, headers=bearer(key), json=body)
            assert resp.status == 404, (method, path)
            assert (await resp.json())["error"]["code"] == "not_found"
    got = await (await client.get(dash, headers=bearer(owner))).json()
    assert got == made


async def test_unknown_ids_are_404(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key)
    assert (await client.get("/v1/dashboards/dsh_nope", headers=bearer(key))).status == 404
    resp = await client.patch(f"/v1/dashboards/{made['id']}/charts/chrt_nope", headers=bearer(key),
                              json={"title": "t"})
    assert resp.status == 404
    assert (await client.delete(f"/v1/dashboards/{made['id']}/charts/chrt_nope", headers=bearer(key))).status == 404
    assert (await client.get(f"/v1/dashboards/{made['id']}/charts/chrt_nope/data", headers=bearer(key))).status == 404
    # A failed chart change leaves the dashboard untouched.
    assert (await (await client.get(f"/v1/dashboards/{made['id']}", headers=bearer(key))).json()) == made


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": 5}, "name"),
    ({"name": "x", "colour": "red"}, "colour"),
    ({"name": " \t "}, "name"),
    ({"name": "x", "charts": [{**CHART, "title": "  "}]}, "charts[0].title"),
    ({"name": "x", "charts": [{**CHART, "type": "scatter"}]}, "charts[0].type"),
    ({"name": "x", "charts": [{**CHART, "event": "Not Snake"}]}, "charts[0].event"),
    ({"name": "x", "charts": [{**CHART, "filters": [{"property": "p", "operator": "like", "value": "a"}]}]},
     "charts[0].filters[0].operator"),
    ({"name": "x", "charts": [{**CHART, "filters": [{"property": "p", "operator": "gt", "value": "5"}]}]},
     "charts[0].filters[0].value"),
    ({"name": "x", "charts": [{**CHART, "filters": [{"property": "p", "operator": "lt", "value": True}]}]},
     "charts[0].filters[0].value"),
    ({"name": "x", "charts": [{**CHART, "filters": [{"property": "", "operator": "eq", "value": "a"}]}]},
     "charts[0].filters[0].property"),
    ({"name": "x", "charts": [{**CHART, "steps": ["buy"]}]}, "charts[0].steps"),
    ({"name": "x", "charts": [{"title": "f", "type": "funnel", "event": "view"}]}, "charts[0].steps"),
    ({"name": "x", "charts": [{"title": "f", "type": "funnel", "event": "view", "steps": ["buy"],
                               "group_by": "plan"}]}, "charts[0].group_by"),
    ({"name": "x", "charts": [{"type": "line", "event": "signup"}]}, "charts[0].title"),
])
async def test_create_validation_names_the_field(client, make_key, body, field):
    key = await make_key("read,write")
    resp = await client.post("/v1/dashboards", headers=bearer(key), json=body)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request"
    assert error["fields"][0]["field"] == field, error


async def test_blank_names_and_titles_are_refused_on_change_and_change_nothing(client, make_key):
    """A blank name or title listed as an empty row; padded ones are kept as sent."""
    key = await make_key("read,write")
    made = await (await client.post("/v1/dashboards", headers=bearer(key),
                                    json={"name": " Growth ", "charts": [CHART]})).json()
    assert made["name"] == " Growth "
    resp = await client.patch(f"/v1/dashboards/{made['id']}", headers=bearer(key), json={"name": "   "})
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == "name"
    chart = made["charts"][0]["id"]
    resp = await client.patch(f"/v1/dashboards/{made['id']}/charts/{chart}", headers=bearer(key),
                              json={"title": "\n"})
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == "title"
    assert (await (await client.get(f"/v1/dashboards/{made['id']}", headers=bearer(key))).json()) == made


async def test_invalid_json_is_400(client, make_key):
    key = await make_key("read,write")
    resp = await client.post("/v1/dashboards", headers={**bearer(key), "Content-Type": "application/json"},
                             data=b"{nope")
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == "invalid_request"


async def test_patch_dashboard(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key, description="old")
    path = f"/v1/dashboards/{made['id']}"
    resp = await client.patch(path, headers=bearer(key), json={"name": "Renamed"})
    assert resp.status == 200
    body = await resp.json()
    assert body["name"] == "Renamed" and body["description"] == "old"
    assert body["updated_at"] > made["updated_at"] and body["created_at"] == made["created_at"]
    body2 = await (await client.patch(path, headers=bearer(key), json={"description": None})).json()
    assert body2["name"] == "Renamed" and body2["description"] is None
    assert body2["updated_at"] > body["updated_at"]
    resp = await client.patch(path, headers=bearer(key), json={"name": ""})
    assert resp.status == 400 and (await resp.json())["error"]["fields"][0]["field"] == "name"


async def test_chart_changes_move_updated_at(client, make_key, database_url):
    key = await make_key("read,write")
    made = await _create(client, key)
    path = f"/v1/dashboards/{made['id']}"

    resp = await client.post(f"{path}/charts", headers=bearer(key), json=CHART)
    assert resp.status == 201
    chart = await resp.json()
    assert chart["id"].startswith("chrt_") and chart["title"] == "Signups"
    after_add = await (await client.get(path, headers=bearer(key))).json()
    assert after_add["updated_at"] > made["updated_at"]
    assert [c["id"] for c in after_add["charts"]] == [chart["id"]]

    second = await (await client.post(f"{path}/charts", headers=bearer(key),
                                      json={"title": "All", "type": "table", "event": "signup"})).json()
    resp = await client.patch(f"{path}/charts/{chart['id']}", headers=bearer(key),
                              json={"title": "Pro signups", "group_by": None})
    assert resp.status == 200
    patched = await resp.json()
    assert patched["title"] == "Pro signups" and patched["group_by"] is None
    assert patched["filters"] == CHART["filters"] and patched["type"] == "line"
    after_patch = await (await client.get(path, headers=bearer(key))).json()
    assert after_patch["updated_at"] > after_add["updated_at"]
    assert [c["id"] for c in after_patch["charts"]] == [chart["id"], second["id"]]

    resp = await client.delete(f"{path}/charts/{chart['id']}", headers=bearer(key))
    assert resp.status == 204 and await resp.read() == b""
    after_delete = await (await client.get(path, headers=bearer(key))).json()
    assert after_delete["updated_at"] > after_patch["updated_at"]
    assert [c["id"] for c in after_delete["charts"]] == [second["id"]]
    listed = (await (await client.get("/v1/dashboards", headers=bearer(key))).json())["data"]
    assert listed[0]["chart_count"] == 1 and listed[0]["updated_at"] == after_delete["updated_at"]


async def test_chart_patch_is_validated_as_a_whole(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key, charts=[CHART])
    path = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}"
    for body, field in [({"type": "funnel"}, "steps"), ({"type": "donut"}, "type"),
                        ({"steps": ["buy"]}, "steps"), ({"shape": 1}, "shape"),
                        ({"filters": [{"property": "n", "operator": "gt", "value": "x"}]}, "filters[0].value")]:
        resp = await client.patch(path, headers=bearer(key), json=body)
        assert resp.status == 400, body
        assert (await resp.json())["error"]["fields"][0]["field"] == field, body
    resp = await client.patch(path, headers=bearer(key), json={"type": "funnel", "steps": ["buy"], "group_by": None})
    assert resp.status == 200
    assert (await resp.json())["steps"] == ["buy"]
    # Leaving a funnel drops its steps.
    back = await (await client.patch(path, headers=bearer(key), json={"type": "bar"})).json()
    assert back["type"] == "bar" and "steps" not in back


async def test_delete_dashboard_removes_its_charts(client, make_key, database_url):
    key = await make_key("read,write")
    made = await _create(client, key, charts=[CHART])
    path = f"/v1/dashboards/{made['id']}"
    resp = await client.delete(path, headers=bearer(key))
    assert resp.status == 204 and await resp.read() == b""
    assert (await client.get(path, headers=bearer(key))).status == 404
    assert (await client.delete(path, headers=bearer(key))).status == 404
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM dashboard_charts WHERE dashboard_id = $1", made["id"]) == 0
    finally:
        await conn.close()


async def test_a_dashboard_holds_at_most_50_charts(client, make_key):
    key = await make_key("read,write")
    made = await _create(client, key, charts=[CHART] * 50)
    resp = await client.post(f"/v1/dashboards/{made['id']}/charts", headers=bearer(key), json=CHART)
    assert resp.status == 409
    resp = await client.post("/v1/dashboards", headers=bearer(key), json={"name": "x", "charts": [CHART] * 51})
    assert resp.status == 400


async def test_inputs_postgresql_cannot_hold_are_refused_not_crashed(client, make_key):
    from storage.ids import encode_cursor

    key = await make_key("read,write")
    resp = await client.post("/v1/dashboards", headers=bearer(key), json={"name": "a\u0000b"})
    assert resp.status == 400 and (await resp.json())["error"]["fields"][0]["field"] == "name"
    resp = await client.post("/v1/dashboards", headers=bearer(key), json={"name": "x", "charts": [
        {**CHART, "filters": [{"property": "n", "operator": "gt", "value": 1e400}]}]})
    assert resp.status == 400
    assert (await client.get("/v1/dashboards/dsh_%00", headers=bearer(key))).status == 404
    assert (await client.get(f"/v1/dashboards/{'d' * 65}", headers=bearer(key))).status == 404
    resp = await client.get("/v1/dashboards", headers=bearer(key), params={"cursor": encode_cursor("a\u0000")})
    assert resp.status == 400
    made = await _create(client, key, charts=[CHART])
    data = f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data"
    resp = await client.get(data, headers=bearer(key), params={"to": "0001-01-02T00:00:00Z"})
    assert resp.status == 400


async def test_write_only_key_cannot_define_or_share_what_it_cannot_read(client, make_key, database_url):
    """A write-only key could otherwise chart a property, share it and read the values through the
    public link: defining charts and sharing need read as well. Deleting and unsharing need only write."""
    both, write = await make_key("read,write"), await make_key("write")
    made = await _create(client, both, charts=[CHART])
    dash = f"/v1/dashboards/{made['id']}"
    chart = f"{dash}/charts/{made['charts'][0]['id']}"

    async def stored():
        conn = await asyncpg.connect(database_url)
        try:
            return (await conn.fetch("SELECT d.name, d.public_token, count(*) OVER () AS n, c.title, c.group_by"
                                     " FROM dashboards d LEFT JOIN dashboard_charts c ON c.dashboard_id = d.id"
                                     " WHERE d.workspace_id = (SELECT workspace_id FROM dashboards WHERE id = $1)"
                                     " ORDER BY d.id, c.id", made["id"]))
        finally:
            await conn.close()

    before = [tuple(r) for r in await stored()]
    for method, path, body in [
        ("POST", "/v1/dashboards", {"name": "leak", "charts": [CHART]}),
        ("PATCH", dash, {"name": "renamed"}),
        ("POST", f"{dash}/charts", {**CHART, "group_by": "email"}),
        ("PATCH", chart, {"group_by": "email"}),
        ("POST", f"{dash}/share", None),
    ]:
        resp = await client.request(method, path, headers=bearer(write), json=body)
        assert resp.status == 403, (method, path, await resp.text())
        assert (await resp.json())["error"] == {"code": "forbidden", "message": "this key lacks the 'read' scope"}
    assert [tuple(r) for r in await stored()] == before
    # Taking exposure away stays a write-only operation.
    assert (await client.delete(f"{dash}/share", headers=bearer(write))).status == 204


async def test_patch_with_a_required_field_null_is_400_and_changes_nothing(client, make_key):
    """A dashboard's name and a chart's title, type, event and filters are required: null is refused naming
    the field (as for reports); description null still clears it (test_patch_dashboard)."""
    key = await make_key("read,write")
    made = await _create(client, key, description="old", charts=[CHART])
    path = f"/v1/dashboards/{made['id']}"
    resp = await client.patch(path, headers=bearer(key), json={"name": None, "description": None})
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == "invalid_request" and error["fields"][0]["field"] == "name"
    for field in ("title", "type", "event", "filters"):
        resp = await client.patch(f"{path}/charts/{made['charts'][0]['id']}", headers=bearer(key),
                                  json={field: None})
        assert resp.status == 400, field
        assert (await resp.json())["error"]["fields"][0]["field"] == field
    assert await (await client.get(path, headers=bearer(key))).json() == made
