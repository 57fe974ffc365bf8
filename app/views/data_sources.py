"""/v1/data-sources: connect, list, inspect, pause/resume, sync now and remove data sources."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from aiohttp import web

from app.appkeys import POOL
from app.auth import key_of, requires
from app.bodies import decode, read_body
from app.responses import ApiError, iso_ms, json_response, not_found
from app.segment import writekeys
from app.sources.runner import RUNNER, NoFreeSlot
from app.sources.schedule import next_sync
from app.sources.schemas import CreateIn, Schedule, decode_parts
from app.views.params import cursor_param, int_param, page_response
from storage import data_sources as store
from storage.ids import new_id

BODY_LIMIT = 64 * 1024


def source_json(row) -> dict:
    return {
        "id": row["id"], "name": row["name"], "type": row["type"], "status": row["status"],
        "status_reason": row["status_reason"], "last_synced_at": iso_ms(row["last_synced_at"]),
        "schedule": {"frequency": row["frequency"], "time": row["sync_time"]},
        "next_sync_at": iso_ms(row["next_sync_at"]), "options": row["options"],
        "rows_imported": row["rows_imported"], "created_at": iso_ms(row["created_at"]),
    }


@requires("admin", "admin")
async def create_source(request: web.Request) -> web.Response:
    key = key_of(request)
    body = decode(await read_body(request, BODY_LIMIT), CreateIn)
    credentials, options = decode_parts(body)
    schedule = body.schedule or Schedule()
    runner = request.config_dict[RUNNER]
    source_id = new_id("src")
    generated = write_key_hash = None
    if body.type == "segment":
        # Segment sources are pushed to, not synced: only the write key's hash is kept, nothing is sealed.
        write_key = credentials.write_key or (generated := writekeys.generate())  # type: ignore[attr-defined]
        write_key_hash = writekeys.hash_write_key(write_key)
    sealed = runner.box.seal(b"{}" if write_key_hash else msgspec.json.encode(credentials), source_id)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.insert(
            conn, source_id=source_id, workspace_id=key.workspace_id, env=key.env, name=body.name,
            type_=body.type, credentials=sealed, options=msgspec.to_builtins(options),
            frequency=schedule.frequency, sync_time=schedule.time, write_key_hash=write_key_hash,
        )
    if row is None:
        raise ApiError(409, "conflict", "a Segment source with this write key already exists")
    created = {"id": row["id"], "name": row["name"], "type": row["type"], "status": row["status"],
               "created_at": iso_ms(row["created_at"])}
    if generated:
        created["write_key"] = generated  # shown this once; only its hash is stored
    if write_key_hash is None:
        # The connection check and first sync run after the 201, in a slot; when none is free the scheduled
        # job starts them once one is.
        await runner.start_new(key.workspace_id, source_id)
    return json_response(created, status=201)


@requires("read", "query")
async def list_sources(request: web.Request) -> web.Response:
    key = key_of(request)
    limit = int_param(request, "limit", 100, 1, 1000)
    (after,) = cursor_param(request, str) or ("",)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.page(conn, key.workspace_id, key.env, after, limit + 1)
    return page_response(rows, limit, source_json, lambda r: (r["id"],))


@requires("read", "query")
async def get_source(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.get(conn, key.workspace_id, key.env, request.match_info["id"])
    if row is None:
        raise not_found("no data source with that id")
    return json_response(source_json(row))


@requires("admin", "admin")
async def delete_source(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        deleted = await store.delete(conn, key.workspace_id, key.env, request.match_info["id"])
    if not deleted:
        raise not_found("no data source with that id")
    return web.Response(status=204)


@requires("admin", "admin")
async def pause_source(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.pause(conn, key.workspace_id, key.env, request.match_info["id"])
    if row is None:
        raise not_found("no data source with that id")
    return json_response(source_json(row))


@requires("admin", "admin")
async def resume_source(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.get(conn, key.workspace_id, key.env, request.match_info["id"])
        if row is None:
            raise not_found("no data source with that id")
        next_at = next_sync(row["frequency"], row["sync_time"], datetime.now(UTC))
        row = await store.resume(conn, key.workspace_id, key.env, row["id"], next_at)
    return json_response(source_json(row))


@requires("admin", "admin")
async def sync_source(request: web.Request) -> web.Response:
    """Start a sync now (202). 409 when paused or still being tested, or when a sync is already running; 429
    when no sync slot this workspace may take is free in this process (nothing is started)."""
    key = key_of(request)
    source_id = request.match_info["id"]
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.get(conn, key.workspace_id, key.env, source_id)
    if row is None:
        raise not_found("no data source with that id")
    if row["type"] == "segment":
        raise ApiError(409, "conflict", "a Segment source receives calls from Segment's SDKs; there is "
                       "nothing to sync")
    if row["status"] in ("active", "error"):  # a state that cannot sync is said before a lack of slots
        try:
            claimed = await request.config_dict[RUNNER].start_sync(key.workspace_id, key.env, source_id)
        except NoFreeSlot as exc:
            # A slot frees when a sync ends, which no one can tell; a minute is the scheduled job's round.
            raise ApiError(429, "too_many_syncs", str(exc), headers={"Retry-After": "60"}) from None
        if claimed is not None:
            return json_response(source_json(claimed), status=202)
        async with request.config_dict[POOL].acquire() as conn:
            row = await store.get(conn, key.workspace_id, key.env, source_id)
        if row is None:
            raise not_found("no data source with that id")
    if row["status"] == "paused":
        raise ApiError(409, "conflict", "the data source is paused; resume it first")
    if row["status"] == "testing":  # running, or waiting for a slot: the first sync follows the check
        raise ApiError(409, "conflict", "the data source is still being tested; its first sync follows the check")
    raise ApiError(409, "conflict", f"the data source is {row['status']}; a run is already in progress")


def setup_data_source_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/data-sources", list_sources)
    router.add_post("/data-sources", create_source)
    router.add_get("/data-sources/{id}", get_source)
    router.add_delete("/data-sources/{id}", delete_source)
    router.add_post("/data-sources/{id}/pause", pause_source)
    router.add_post("/data-sources/{id}/resume", resume_source)
    router.add_post("/data-sources/{id}/sync", sync_source)
