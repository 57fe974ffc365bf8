"""GET /api/analytics/events (the paged event log) and /export (a streamed CSV or JSON file)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping

import orjson
from aiohttp import web

from app.appkeys import POOL
from app.responses import SiteError, iso_ms, json_response
from app.views.analytics_params import analytics_store, base_params, count_param, offset_param, resolve_site
from storage import analytics
from storage import analytics_events as store

LOG_DEFAULT, LOG_MAX = 50, 500
EXPORT_DEFAULT, EXPORT_MAX = 10_000, 50_000
FLUSH_ROWS = 500
# Export columns, in order (CSV header = these names; JSON objects carry the same keys).
EXPORT_COLUMNS = ("id", "createdAt", "name", "url", "path", "referrer", "title", "viewportW", "sessionId",
                  "country", "props")
_CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def stored_event(row: Mapping) -> dict:
    return {
        "id": row["id"],
        "name": row["name"],
        "url": row["url"],
        "path": row["path"],
        "referrer": row["referrer"],
        "title": row["title"],
        "viewportW": row["viewport_w"],
        "props": row["properties"],
        "sessionId": row["session_id"],
        "country": row["country"],
        "createdAt": iso_ms(row["ts"]),
    }


async def events(request: web.Request) -> web.Response:
    base = await base_params(request)
    limit = count_param(request, "limit", LOG_DEFAULT, LOG_MAX)
    offset = offset_param(request)
    name = request.query.get("eventName") or None
    site = await resolve_site(request, base)
    w = base.window
    db = await analytics_store(request)
    total = await analytics.count_events(db, site.id, w.start, w.end, name)
    async with request.app[POOL].acquire() as conn:
        rows = await store.list_events(conn, site.id, w.start, w.end, name, limit, offset) if offset < total else []
    return json_response({"events": [stored_event(r) for r in rows], "total": total, "limit": limit,
                          "offset": offset})


def _csv_row(event: dict) -> list:
    """Empty cells for NULLs; props as its JSON text."""
    props = event["props"]
    cells = ["" if event[c] is None else event[c] for c in EXPORT_COLUMNS[:-1]]
    return [*cells, "" if props is None else orjson.dumps(props).decode()]


def export_filename(site_id: str, range_name: str, fmt: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", site_id)
    return f"tally-{safe}-{range_name}.{fmt}"


async def export(request: web.Request) -> web.StreamResponse:
    base = await base_params(request)
    fmt = request.query.get("format") or "csv"
    if fmt not in _CONTENT_TYPES:
        raise SiteError(400, "invalid format", allowed=list(_CONTENT_TYPES))
    limit = count_param(request, "limit", EXPORT_DEFAULT, EXPORT_MAX)
    site = await resolve_site(request, base)
    w = base.window
    response = web.StreamResponse(headers={
        "Content-Type": _CONTENT_TYPES[fmt],
        "Content-Disposition": f'attachment; filename="{export_filename(site.id, w.range, fmt)}"',
        "Cache-Control": "no-store",
        "X-Export-Limit": str(limit),
    })
    async with request.app[POOL].acquire() as conn, conn.transaction(readonly=True):
        rows = store.stream_events(conn, site.id, w.start, w.end, limit)
        await response.prepare(request)
        try:
            await (_write_csv if fmt == "csv" else _write_json)(response, rows)
        except ConnectionResetError:
            return response  # the client went away; the cursor and transaction close with the block
    await response.write_eof()
    return response


async def _write_csv(response: web.StreamResponse, rows) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_COLUMNS)
    pending = 1
    async for row in rows:
        event = stored_event(row)
        writer.writerow(_csv_row(event))
        pending += 1
        if pending >= FLUSH_ROWS:
            await response.write(buffer.getvalue().encode())
            buffer.seek(0)
            buffer.truncate()
            pending = 0
    await response.write(buffer.getvalue().encode())


async def _write_json(response: web.StreamResponse, rows) -> None:
    chunk = [b"["]
    first = True
    async for row in rows:
        event = stored_event(row)
        chunk.append((b"" if first else b",") + orjson.dumps({c: event[c] for c in EXPORT_COLUMNS}))
        first = False
        if len(chunk) >= FLUSH_ROWS:
            await response.write(b"".join(chunk))
            chunk = []
    chunk.append(b"]")
    await response.write(b"".join(chunk))
