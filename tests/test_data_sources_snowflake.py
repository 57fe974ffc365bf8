"""Snowflake through the real snowflake-connector-python against fakesnow's server, run in process on
loopback (fakesnow emulates Snowflake's REST protocol on DuckDB). The fake is wrapped so that a wrong
password is refused with Snowflake's own login error, as the real service does."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import secrets
import shutil
import socket
import threading
import time

import fakesnow.server
import fakesnow.transforms.stage
import pytest
import snowflake.connector
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.conftest import bearer
from tests.test_data_sources import create, wait_status
from tests.test_data_sources_sql import events

USER, PASSWORD = "importer", "Snow-Secret-pw-4242"


async def login(request: Request) -> JSONResponse:
    body = await request.body()
    if request.headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    data = json.loads(body)["data"]
    if data.get("LOGIN_NAME") != USER or data.get("PASSWORD") != PASSWORD:
        return JSONResponse({"data": {"nextAction": "RETRY_LOGIN"}, "code": "390100", "success": False,
                             "message": "Incorrect username or password was specified."})
    return await fakesnow.server.login_request(request)


def fake_snowflake_app() -> Starlette:
    routes = [Route("/session/v1/login-request", login, methods=["POST"]),
              *(r for r in fakesnow.server.routes if r.path != "/session/v1/login-request")]
    return Starlette(routes=routes)


@pytest.fixture(scope="module")
def snow_url():
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(fake_snowflake_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="fake snowflake", daemon=True)
    thread.start()
    for _ in range(100):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
    # fakesnow makes a directory for its stages' files when imported; no test here uses a stage.
    shutil.rmtree(fakesnow.transforms.stage.LOCAL_BUCKET_PATH, ignore_errors=True)


def run_sql(url: str, database: str, *statements: str) -> None:
    """Set up the warehouse with the same client (blocking; called in a thread)."""
    port = int(url.rsplit(":", 1)[1])
    conn = snowflake.connector.connect(account="fakesnow", user=USER, password=PASSWORD, host="127.0.0.1",
                                       port=port, protocol="http", network_timeout=5,
                                       session_parameters={"CLIENT_OUT_OF_BAND_TELEMETRY_ENABLED": False})
    try:
        cur = conn.cursor()
        for sql in statements:
            cur.execute(sql.replace("{db}", database))
    finally:
        conn.close()


@pytest.fixture
async def warehouse(snow_url):
    database = f"TALLY_{secrets.token_hex(4)}".upper()
    await asyncio.to_thread(run_sql, snow_url, database, "CREATE DATABASE {db}", "CREATE SCHEMA {db}.PUBLIC",
                            "CREATE TABLE {db}.PUBLIC.SIGNUPS (ID INT, USER_ID VARCHAR, PLAN VARCHAR, "
                            "AMOUNT NUMBER(10, 2), CREATED_AT TIMESTAMP_NTZ)")
    return snow_url, database


async def add_signups(url: str, database: str, *rows: tuple) -> None:
    values = ", ".join(f"({i}, '{u}', '{p}', 9.5, '{ts}')" for i, u, p, ts in rows)
    await asyncio.to_thread(run_sql, url, database, f"INSERT INTO {{db}}.PUBLIC.SIGNUPS VALUES {values}")


def snow_source(url: str, database: str, password: str = PASSWORD, **options) -> dict:
    return {"name": "snow", "type": "snowflake",
            "credentials": {"account": "acme-xy12345", "warehouse": "COMPUTE_WH", "database": database,
                            "username": USER, "password": password},
            "options": {"base_url": url, "table": "public.signups", "cursor_column": "created_at",
                        "event_name": "signed_up", **options}}


async def test_snowflake_first_sync_then_incremental(client, make_key, warehouse, monkeypatch, caplog):
    url, database = warehouse
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")  # clickhouse-connect turns it down to WARNING
    monkeypatch.setattr("app.sources.snowflake.PAGE", 2)
    await add_signups(url, database, (1, "s1", "free", "2024-03-01 10:00:00"), (2, "s2", "pro", "2024-03-02 10:00:00"),
                      (3, "s1", "pro", "2024-03-03 10:00:00"))
    admin = await make_key("admin,read")
    created = await create(client, admin, snow_source(url, database))
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    got = await events(client, admin, "signed_up")
    assert [e["user_id"] for e in got] == ["s1", "s2", "s1"]
    assert got[0]["timestamp"] == "2024-03-03T10:00:00.000Z"
    assert got[0]["properties"] == {"id": 3, "plan": "pro", "amount": 9.5, "created_at": "2024-03-03T10:00:00"}

    await add_signups(url, database, (4, "s3", "team", "2024-03-04 10:00:00"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(admin))).status == 202
    body = await wait_status(client, admin, created["id"], "active")
    assert body["rows_imported"] == 4
    got = await events(client, admin, "signed_up")
    assert len(got) == 4 and got[0]["user_id"] == "s3"
    profile = await (await client.get("/v1/users/s1", headers=bearer(admin))).json()
    assert profile["event_count"] == 2
    logged = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert any(r.name.startswith("snowflake.connector") for r in caplog.records)  # its debug lines, captured
    assert PASSWORD not in logged


async def test_snowflake_query_event_column_and_mapping(client, make_key, warehouse):
    url, database = warehouse
    await add_signups(url, database, (1, "s1", "free", "2024-03-01 10:00:00"), (2, "s2", "pro", "2024-03-02 10:00:00"))
    admin = await make_key("admin,read")
    source = snow_source(url, database, query="SELECT id, user_id, plan, created_at FROM public.signups "
                                              "WHERE plan LIKE '%r%'",
                         cursor_column="id", event_column="plan", properties={"signup_id": "id"})
    del source["options"]["table"], source["options"]["event_name"]
    created = await create(client, admin, source)
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body
    [pro] = await events(client, admin, "pro")
    assert pro["user_id"] == "s2" and pro["properties"] == {"signup_id": 2}
    assert pro["timestamp"] != "2024-03-02T10:00:00.000Z"  # no timestamp_column: the cursor (id) is no time
    await add_signups(url, database, (3, "s3", "pro", "2024-03-03 10:00:00"))
    assert (await client.post(f"/v1/data-sources/{created['id']}/sync", headers=bearer(admin))).status == 202
    body = await wait_status(client, admin, created["id"], "active", "error")
    assert body["status"] == "active", body  # the `%` in the query and the bound cursor value coexist
    assert [e["user_id"] for e in await events(client, admin, "pro")] == ["s3", "s2"]


@pytest.mark.parametrize("case", ["bad_password", "unreachable", "missing_table"])
async def test_snowflake_failures_end_in_error_with_a_reason(client, make_key, warehouse, case, caplog):
    url, database = warehouse
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="urllib3")  # clickhouse-connect turns it down to WARNING
    password = "Wrong-Snow-pw-777" if case == "bad_password" else PASSWORD
    source = snow_source(url, database, password=password)
    if case == "unreachable":
        source["options"]["base_url"] = "http://127.0.0.1:1"
    if case == "missing_table":
        source["options"]["table"] = "public.orders"
    admin = await make_key("admin,read")
    resp = await client.post("/v1/data-sources", json=source, headers=bearer(admin))
    assert resp.status == 201 and password not in await resp.text()
    body = await wait_status(client, admin, (await resp.json())["id"], "error", tries=1200)
    reason = body["status_reason"]
    if case == "bad_password":
        assert reason.startswith("Snowflake refused the login") and "Incorrect username or password" in reason
    elif case == "unreachable":
        assert reason.startswith("could not reach Snowflake at 127.0.0.1:1"), reason
    else:
        assert "ORDERS" in reason.upper() and "does not exist" in reason, reason
    lines = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "data source sync failed" in lines
    assert password not in lines and password not in str(body)
