"""Saved reports under /v1/reports: CRUD, synchronous runs, scheduled delivery settings."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from aiohttp import hdrs, web

from app.appkeys import ANALYTICS, METRICS, MIRROR, POOL, REPORT_POOL, REPORT_SLOTS, SETTINGS
from app.auth import key_of, requires
from app.bodies import decode, read_body
from app.reports.config import ReportIn, ReportPatch, Schedule, config_json, parse_config
from app.reports.runner import require_plan, run_report
from app.reports.schedule import next_slot
from app.responses import ApiError, iso_ms, json_response, not_found
from app.views.params import cursor_param, int_param, page_response
from storage import reports as store
from storage.ids import new_id

BODY_LIMIT = 64 * 1024


def report_json(row, *, summary: bool = False) -> dict:
    out = {"id": row["id"], "name": row["name"], "type": row["type"]}
    if not summary:
        out["config"] = row["config"]
        out["schedule"] = row["schedule"]
    out["created_at"] = iso_ms(row["created_at"])
    out["last_run_at"] = iso_ms(row["last_run_at"])
    return out


def _schedule(schedule: Schedule | None) -> tuple[dict | None, datetime | None]:
    if schedule is None:
        return None, None
    return msgspec.to_builtins(schedule), next_slot(schedule.frequency, datetime.now(UTC))


def _mailing_needs_read(key, schedule) -> None:
    """A scheduled report mails its results to any address: like sharing a dashboard, it reads data,
    so a write-only key may save reports but not schedule (or change a scheduled) one."""
    if schedule is not None and "read" not in key.scopes:
        raise ApiError(403, "forbidden", "a scheduled report mails its results: this key lacks the 'read' scope")


async def _stored(request: web.Request):
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.get_report(conn, key.workspace_id, key.env, request.match_info["id"])
    if row is None:
        raise not_found("no report with that id")
    return row


@requires("write", "query")
async def create_report(request: web.Request) -> web.Response:
    key = key_of(request)
    body = decode(await read_body(request, BODY_LIMIT), ReportIn)
    require_plan(body.type, key.plan)
    config = config_json(parse_config(body.type, body.config))
    _mailing_needs_read(key, body.schedule)
    schedule, next_run_at = _schedule(body.schedule)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.insert_report(
            conn, report_id=new_id("rpt"), workspace_id=key.workspace_id, env=key.env, name=body.name,
            type_=body.type, config=config, schedule=schedule, next_run_at=next_run_at,
        )
    return json_response(report_json(row), status=201)


@requires("read", "query")
async def list_reports(request: web.Request) -> web.Response:
    key = key_of(request)
    limit = int_param(request, "limit", 50, 1, 200)
    (before,) = cursor_param(request, str) or (None,)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.list_reports(conn, key.workspace_id, key.env, before_id=before, limit=limit + 1)
    return page_response(rows, limit, lambda r: report_json(r, summary=True), lambda r: (r["id"],))


@requires("read", "query")
async def get_report(request: web.Request) -> web.Response:
    return json_response(report_json(await _stored(request)))


@requires("write", "query")
async def patch_report(request: web.Request) -> web.Response:
    key = key_of(request)
    body = decode(await read_body(request, BODY_LIMIT), ReportPatch)
    row = await _stored(request)
    report_type = row["type"] if body.type is msgspec.UNSET else body.type
    new_config = body.config is not msgspec.UNSET
    # The stored config is normalised already. It is re-checked only when it or the type changes, so a
    # report whose range to now has since grown past the bucket cap can still be renamed or rescheduled.
    config = row["config"]
    if report_type != row["type"] or new_config:
        require_plan(report_type, key.plan)
        config = config_json(parse_config(report_type, body.config if new_config else row["config"]))
    if body.schedule is msgspec.UNSET:
        schedule, next_run_at = row["schedule"], row["next_run_at"]
    else:
        schedule, next_run_at = _schedule(body.schedule)
    _mailing_needs_read(key, schedule)
    name = row["name"] if body.name is msgspec.UNSET else body.name
    async with request.config_dict[POOL].acquire() as conn:
        updated = await store.update_report(
            conn, key.workspace_id, key.env, row["id"], name=name, type_=report_type,
            config=config, schedule=schedule, next_run_at=next_run_at,
        )
    if updated is None:
        raise not_found("no report with that id")
    return json_response(report_json(updated))


@requires("write", "query")
async def delete_report(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        deleted = await store.delete_report(conn, key.workspace_id, key.env, request.match_info["id"])
    if not deleted:
        raise not_found("no report with that id")
    return web.Response(status=204)


@requires("read", "query")
async def run(request: web.Request) -> web.Response:
    key = key_of(request)
    row = await _stored(request)
    if request.method == hdrs.METH_HEAD:  # aiohttp routes HEAD here: a probe checks access, runs nothing
        return web.Response(content_type="application/json")
    with request.config_dict[REPORT_SLOTS].take(key.workspace_id):  # no tenant holds the whole report pool
        result = await run_report(  # built-in reports see every event committed before the run
            request.config_dict[REPORT_POOL], request.config_dict[SETTINGS], request.config_dict[METRICS],
            workspace_id=key.workspace_id, env=key.env, plan=key.plan, report_type=row["type"],
            config=row["config"], analytics=request.config_dict[ANALYTICS],
            catch_up=request.config_dict[MIRROR].catch_up,
        )
    async with request.config_dict[POOL].acquire() as conn:
        await store.mark_run(conn, row["id"], result.generated_at)
    return json_response(result.json())


def setup_report_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/reports", create_report)
    router.add_get("/reports", list_reports)
    router.add_get("/reports/{id}", get_report)
    router.add_patch("/reports/{id}", patch_report)
    router.add_delete("/reports/{id}", delete_report)
    router.add_get("/reports/{id}/run", run)
