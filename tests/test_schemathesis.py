"""Property-based requests generated from /openapi.json: no request may produce a 5xx.

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


@pytest.mark.skipif(shutil.which("schemathesis", path=os.path.dirname(sys.executable)) is None,
                    reason="schemathesis is installed with the dev extra")
async def test_no_generated_request_produces_a_server_error(database_url, make_key, workspace, login, client):
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
            [st, "run", f"{base}/openapi.json", "--checks", "not_a_server_error", "--max-examples", "25",
             "--seed", "20261125", "--generation-deterministic", "--phases", "examples,fuzzing",
             "-H", f"Authorization: Bearer {key}", "-H", f"Cookie: tally_session={cookie}",
             "--exclude-path-regex", "^/(api/auth/logout)$", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=900,
        )
    finally:
        await asyncio.to_thread(server_process.stop, proc)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
