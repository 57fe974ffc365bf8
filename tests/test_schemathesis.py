"""Property-based requests generated from /openapi.json: no request may produce a 5xx, and every answer is one
the document describes (its status, content type, headers and body schema), so a client generated from it
can read what the server sends.

Runs the schemathesis CLI against a real server process, with a key holding every scope on a workspace
whose limits are far above the generated load, and a signed-in dashboard session cookie.
"""

import asyncio
import os
import shutil
import subprocess
import sys

import aiohttp
import pytest

from storage import workspaces
from tests import server_process
from tests.conftest import connect

HUGE = [1_000_000, 60_000_000]
# Checks of the answers alone: those of the requests (was an invalid one refused, a valid one accepted) find the
# rules a schema cannot say (a chart's steps only on funnels, a cursor this server made) and the harness's own
# cookie, which it cannot leave out. The coverage phase sends each operation's edge and invalid values, and
# bodies of undeclared content types (a multipart form without a boundary was a 500).
_CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
           "response_headers_conformance")


@pytest.mark.skipif(shutil.which("schemathesis", path=os.path.dirname(sys.executable)) is None,
                    reason="schemathesis is installed with the dev extra")
async def test_generated_requests_get_no_server_error_and_documented_answers(database_url, make_key, workspace, login,
                                                                             client):
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
        st = os.path.join(os.path.dirname(sys.executable), "schemathesis")
        done = await asyncio.to_thread(
            subprocess.run,
            [st, "run", f"{base}/openapi.json", "--checks", _CHECKS, "--max-examples", "25",
             "--seed", "20261125", "--generation-deterministic", "--phases", "examples,coverage,fuzzing",
             "-H", f"Authorization: Bearer {key}", "-H", f"Cookie: tally_session={cookie}",
             "--exclude-path-regex", "^/(api/auth/logout)$", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=900,
        )
    finally:
        await asyncio.to_thread(server_process.stop, proc)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
