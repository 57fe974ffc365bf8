"""GET /api/analytics/events (the paged event log) and /export (a streamed CSV or JSON file)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator, Mapping

import msgspec
from aiohttp import hdrs, web

from app.appkeys import METRICS, POOL, SETTINGS
from app.csv_cells import csv_line
from app.dashboard_session import current_account
from app.responses import SiteError, iso_ms, json_response
from app.views.analytics_params import (
    Window,
    analytics_store,
    base_params,
    count_param,
    offset_param,
    site_and_filters,
)
from storage import analytics_events as store
from storage import analytics_lists
from storage.analytics import Filters
from storage.site_filters import Filter

log = logging.getLogger("tally.export")

LOG_DEFAULT, LOG_MAX = 50, 500
# PostgreSQL (or the store, under filters) reads past an offset row by row: 8,000,000 took 61 s on a pool
# connection at 9M events, so the log pages 2,000 pages of 50 deep, and the export takes over from there.
LOG_MAX_OFFSET = 100_000
EXPORT_DEFAULT, EXPORT_MAX = 10_000, 50_000
EXPORT_PAGE = 500  # rows per keyset query, and per write
# Keys asked of the analytics store at once by a filtered export: each ask reads the filtered window, which
# took 0.3-0.8 s at 90 days of 9M events, so a 50,000-row export asked once a page (100 times) took 31-80 s.
EXPORT_KEYS = 10_000
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


def _narrowed(filters: Filters) -> bool:
    """Whether the overview's filters ask for more than an event name: PostgreSQL's index then cannot find
    the rows, and the analytics store, which knows every filter's dimensions, gives their keys."""
    return filters.terms() != ([Filter("event", "==", filters.name)] if filters.name else [])


async def events(request: web.Request) -> web.Response:
    """The event log, newest first, under the overview's filters (the same parameters as its reads)."""
    base = await base_params(request)
    limit = count_param(request, "limit", LOG_DEFAULT, LOG_MAX)
    offset = offset_param(request)
    if offset > LOG_MAX_OFFSET:
        raise SiteError(400, "offset too large", maxOffset=LOG_MAX_OFFSET,
                        detail="narrow the range or the filters, or export the events")
    site, filters = await site_and_filters(request, base)
    w = base.window
    db = await analytics_store(request, base.workspace_id)
    total = await analytics_lists.count_events(db, site.id, w.start, w.end, filters.terms())
    rows: list = []
    if offset < total:
        if _narrowed(filters):
            keys = await analytics_lists.matching_event_keys(db, site.id, w.start, w.end, filters, None, limit, offset)
            async with request.config_dict[POOL].acquire() as conn:
                rows = await store.events_by_keys(conn, site.id, keys)
        else:
            async with request.config_dict[POOL].acquire() as conn:
                rows = await store.list_events(conn, site.id, w.start, w.end, filters.name, limit, offset)
    return json_response({"events": [stored_event(r) for r in rows], "total": total, "limit": limit,
                          "offset": offset})


def range_label(w: Window) -> str:
    """The range in an export's name: its name, or the days of a calendar period or custom range
    (`2026-11-01_2026-11-15`)."""
    return w.range if w.days is None else f"{w.days[0]}_{w.days[1]}"


def export_filename(site_id: str, range_name: str, fmt: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", site_id)
    return f"tally-{safe}-{range_name}.{fmt}"


class ExportSlots:
    """Exports running per signed-in account, in this process (an account, not a cookie: signing in
    again must not buy more slots)."""

    def __init__(self) -> None:
        self.running: dict[int, int] = {}

    @contextlib.contextmanager
    def take(self, account_id: int, limit: int) -> Iterator[None]:
        if self.running.get(account_id, 0) >= limit:
            raise SiteError(429, "too many exports running; wait for one to finish",
                            headers={"Retry-After": "10"}, limit=limit)
        self.running[account_id] = self.running.get(account_id, 0) + 1
        try:
            yield
        finally:
            self.running[account_id] -= 1
            if not self.running[account_id]:
                del self.running[account_id]


EXPORT_SLOTS: web.AppKey[ExportSlots] = web.AppKey("export_slots", ExportSlots)


async def export(request: web.Request) -> web.StreamResponse:
    """Pages through the window with keyset queries, each on a pool connection held only for that
    query: a client that reads slowly (or never) holds no database connection, only its slot. Under the
    overview's filters (beyond an event name) each page's keys come from the analytics store, which knows
    every filter's dimensions, and its rows from PostgreSQL.

    HEAD (which aiohttp routes here) passes the same checks and answers the same status and headers, then
    ends: a download manager's or `curl -I`'s probe reads no event and brings no store up to date."""
    probe = request.method == hdrs.METH_HEAD
    base = await base_params(request)
    fmt = request.query.get("format") or "csv"
    if fmt not in _CONTENT_TYPES:
        raise SiteError(400, "invalid format", allowed=list(_CONTENT_TYPES))
    limit = count_param(request, "limit", EXPORT_DEFAULT, EXPORT_MAX)
    site, filters = await site_and_filters(request, base)
    name = filters.name  # as the event log: it exports what the log lists
    db = await analytics_store(request, base.workspace_id) if _narrowed(filters) and not probe else None
    account = await current_account(request)
    settings = request.config_dict[SETTINGS]
    w = base.window
    with request.config_dict[EXPORT_SLOTS].take(account.id, settings.exports_per_account):
        response = web.StreamResponse(headers={
            "Content-Type": _CONTENT_TYPES[fmt],
            "Content-Disposition": f'attachment; filename="{export_filename(site.id, range_label(w), fmt)}"',
            "Cache-Control": "no-store",
            "X-Export-Limit": str(limit),
        })
        await response.prepare(request)
        if probe:
            await response.write_eof()
            return response
        encode = _csv_page if fmt == "csv" else _json_page
        counted = request.config_dict[METRICS].exported_events.labels(fmt)
        after, sent = None, 0
        # Filtered exports: the keys the store gave beyond the page being written, and whether it has no more.
        ahead: list = []
        exhausted = False
        try:
            while True:
                size = min(EXPORT_PAGE, limit - sent)
                if db is None:
                    async with request.config_dict[POOL].acquire() as conn:
                        rows = await store.export_page(conn, site.id, w.start, w.end, name, after, size)
                    keys = [(r["ts"], r["id"]) for r in rows]
                    done = len(keys) < EXPORT_PAGE
                else:
                    if len(ahead) < size and not exhausted:
                        want = min(EXPORT_KEYS, limit - sent - len(ahead))
                        more = await analytics_lists.matching_event_keys(
                            db, site.id, w.start, w.end, filters, ahead[-1] if ahead else after, want)
                        exhausted = len(more) < want
                        ahead += more
                    keys, ahead = ahead[:size], ahead[size:]
                    done = exhausted and not ahead
                    async with request.config_dict[POOL].acquire() as conn:
                        rows = await store.events_by_keys(conn, site.id, keys)
                counted.inc(len(rows))
                last = sent + len(keys) >= limit or done
                async with asyncio.timeout(settings.export_write_timeout_seconds):
                    await response.write(encode(rows, first=sent == 0, last=last))
                if last:
                    break
                sent += len(keys)
                after = keys[-1]
        except TimeoutError:
            # The client stopped reading: drop the connection rather than wait on it forever.
            _cut_off(request)
            return response
        except ConnectionResetError:
            return response  # the client went away
        except Exception:
            # The 200 and some rows are sent: the download can only end short, with no last chunk, so the
            # client sees it incomplete (an error answer would be written into the file's bytes).
            log.exception("export failed after its first byte site=%s", site.id)
            _cut_off(request)
            return response
    await response.write_eof()
    return response


def _cut_off(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


def _csv_page(rows: list, *, first: bool, last: bool) -> bytes:
    lines = [csv_line(list(EXPORT_COLUMNS))] if first else []
    for event in map(stored_event, rows):
        if isinstance(event["props"], str):  # as JSON text, as props of every other type are (csv_cell)
            event["props"] = msgspec.json.encode(event["props"]).decode()
        lines.append(csv_line([event[c] for c in EXPORT_COLUMNS]))
    return "".join(lines).encode()


def _json_page(rows: list, *, first: bool, last: bool) -> bytes:
    parts = [b"["] if first else []
    for i, row in enumerate(rows):
        event = stored_event(row)
        # msgspec, as every /api answer: stored props may hold integers beyond 64 bits, which orjson refuses.
        parts.append((b"" if first and i == 0 else b",") + msgspec.json.encode({c: event[c] for c in EXPORT_COLUMNS}))
    if last:
        parts.append(b"]")
    return b"".join(parts)
