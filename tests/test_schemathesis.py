"""Property-based requests generated from /openapi.json: no request may produce a 5xx, and every answer is one
the document describes (its status, content type, headers and body schema), so a client generated from it
can read what the server sends.

Runs the schemathesis CLI against a real server process, with a key holding every scope on a workspace
whose limits are far above the generated load, a signed-in dashboard session cookie and the dashboard's own
Origin (without it every dashboard write was a 403 before its body was read). A site with events, a goal, a
shared link, a report, a dashboard with a chart, a shared dashboard and a Segment source are made first, and
their ids fill the path, `siteId` and shared-link `auth` parameters, so each operation is fuzzed on something
that exists rather than answering 404 (a longer run of this kind found a key name holding U+0000 to be a 500).
Deletes keep generated ids: they would remove what the rest reads. The Segment calls run a second time with the
source's write key, as Segment's SDKs authenticate.
"""

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys

import aiohttp
import pytest

from app.openapi import document
from storage import workspaces
from tests import server_process
from tests.conftest import connect
from tests.site_helpers import BROWSER_UA

HUGE = [1_000_000, 60_000_000]
# Checks of the answers alone: those of the requests (was an invalid one refused, a valid one accepted) find the
# rules a schema cannot say (a chart's steps only on funnels, a cursor this server made) and the harness's own
# cookie, which it cannot leave out. The coverage phase sends each operation's edge and invalid values, and
# bodies of undeclared content types (a multipart form without a boundary was a 500).
_CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
           "response_headers_conformance")


async def _made(http: aiohttp.ClientSession, base: str, key: str, cookie: str) -> dict[str, str]:
    """What the generated requests read: each thing's id, by the parameter that names it."""
    keyed, dashboard = {"Authorization": f"Bearer {key}"}, {"Cookie": f"tally_session={cookie}", "Origin": base}

    async def made(method: str, path: str, headers: dict, body: object | None = None) -> dict:
        async with http.request(method, f"{base}{path}", headers=headers, json=body) as resp:
            assert resp.status in (200, 201), (path, resp.status, await resp.text())
            return await resp.json()

    site = await made("POST", "/api/sites", dashboard, {"domain": "fuzz.example"})
    for i in range(12):
        async with http.post(f"{base}/api/event", headers={"User-Agent": BROWSER_UA, "Origin": "https://fuzz.example"},
                             json={"n": "signup" if i % 4 == 0 else "pageview", "d": "fuzz.example",
                                   "u": f"https://fuzz.example/p{i % 3}?utm_source=news",
                                   "r": "https://news.example/", "p": {"plan": "ab"[i % 2]}}) as resp:
            assert resp.status == 202, await resp.text()
    for i in range(4):
        await made("POST", "/v1/events", keyed, {"event": "signup" if i % 2 else "login", "user_id": f"u{i}"})
    await made("POST", "/v1/identify", keyed, {"user_id": "u1", "traits": {"plan": "pro"}})
    goal = await made("POST", f"/api/sites/{site['id']}/goals", dashboard,
                      {"goal_type": "event", "event_name": "signup"})
    link = await made("POST", f"/api/sites/{site['id']}/shared-links", dashboard, {"name": "fuzz"})
    report = await made("POST", "/v1/reports", keyed,
                        {"name": "fuzz", "type": "funnel", "config": {"events": ["login", "signup"]}})
    board = await made("POST", "/v1/dashboards", keyed,
                       {"name": "fuzz", "charts": [{"title": "signups", "type": "line", "event": "signup"}]})
    shared = await made("POST", f"/v1/dashboards/{board['id']}/share", keyed)
    source = await made("POST", "/v1/data-sources", keyed, {"name": "fuzz", "type": "segment", "credentials": {}})
    return {"site": site["id"], "goal": goal["id"], "link": link["id"], "link_token": link["url"].rsplit("/", 1)[1],
            "report": report["id"], "dashboard": board["id"], "chart": board["charts"][0]["id"],
            "dashboard_token": shared["public_url"].rsplit("/", 1)[1], "source": source["id"],
            "write_key": source["write_key"]}


def _config(ids: dict[str, str]) -> str:
    """schemathesis.toml: the made ids in the parameters that name them, on every operation but deletes."""
    by_path = {"^/v1/reports/": {"path.id": ids["report"]},
               "^/v1/dashboards/": {"path.id": ids["dashboard"], "path.chart_id": ids["chart"]},
               "^/v1/data-sources/": {"path.id": ids["source"]},
               "^/public/dashboards/": {"path.token": ids["dashboard_token"]},
               "^/share/": {"path.token": ids["link_token"]},
               "^/api/sites/": {"path.site_id": ids["site"], "path.goal_id": ids["goal"], "path.link_id": ids["link"]},
               # a shared link's token reads its own site's overview endpoints
               "^/api/analytics/": {"query.siteId": ids["site"], "query.auth": ids["link_token"]},
               # Plausible's Stats API (v1) names the site by its domain
               "^/api/v1/stats/": {"query.site_id": "fuzz.example"},
               "^/api/v1/sites/": {"path.site_id": "fuzz.example"},
               "^/v1/users/": {"path.user_id": "u1"},
               "^/v1/projects/": {"path.write_key": ids["write_key"]}}
    text = json.dumps  # TOML's basic strings read as JSON's
    return "".join(
        f"[[operations]]\ninclude-path-regex = {text(path)}\nexclude-method = \"DELETE\"\n"
        f"parameters = {{ {', '.join(f'{text(name)} = {text(value)}' for name, value in params.items())} }}\n\n"
        for path, params in by_path.items())


def _segment_paths() -> str:
    """The paths the document says take a Segment write key, as one regex: every Segment call and its short form."""
    paths = (path for path, item in document()["paths"].items()
             if any({"segmentWriteKey": []} in op.get("security", []) for op in item.values() if isinstance(op, dict)))
    return f"^({'|'.join(map(re.escape, paths))})$"


@pytest.mark.skipif(shutil.which("schemathesis", path=os.path.dirname(sys.executable)) is None,
                    reason="schemathesis is installed with the dev extra")
async def test_generated_requests_get_no_server_error_and_documented_answers(database_url, make_key, workspace, login,
                                                                             client, tmp_path):
    key = await make_key("read,write,admin")
    conn = await connect(database_url)
    try:
        workspace_id = await workspaces.ensure_workspace(conn, workspace)
        await workspaces.set_plan(conn, workspace_id, "enterprise", {g: HUGE for g in
                                                                      ("events", "identify", "query", "admin")})
    finally:
        await conn.close()
    email = await login()
    proc, base = await asyncio.to_thread(server_process.start, {"DATABASE_URL": database_url})
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/api/auth/login",
                                 json={"email": email, "password": "correct horse battery"}) as resp:
                assert resp.status == 200
                cookie = resp.cookies["tally_session"].value
            ids = await _made(http, base, key, cookie)
        config = tmp_path / "schemathesis.toml"
        config.write_text(_config(ids))

        def run(*options: str) -> subprocess.CompletedProcess:
            st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
            return subprocess.run(
                [st, "--config-file", str(config), "run", f"{base}/openapi.json", "--checks", _CHECKS,
                 "--max-examples", "25", "--seed", "20261125", "--generation-deterministic",
                 "--phases", "examples,coverage,fuzzing", "-H", f"Cookie: tally_session={cookie}",
                 "-H", f"Origin: {base}", "--request-timeout", "30", *options],
                capture_output=True, text=True, timeout=900)

        done = await asyncio.to_thread(run, "-H", f"Authorization: Bearer {key}",
                                       "--exclude-path-regex", "^/(api/auth/logout)$")
        # The Segment calls again with the source's write key (HTTP Basic), as Segment's SDKs send them: then
        # they answer in Segment's shapes (POST /v1/identify's were undocumented).
        segment = base64.b64encode(f"{ids['write_key']}:".encode()).decode()
        segment_done = await asyncio.to_thread(
            run, "-H", f"Authorization: Basic {segment}",
            "--include-path-regex", _segment_paths())
    finally:
        await asyncio.to_thread(server_process.stop, proc)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert segment_done.returncode == 0, segment_done.stdout[-6000:] + segment_done.stderr[-2000:]
