"""POST /v1/events, POST /v1/events/batch, GET /v1/events."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from actors.base import Overloaded, StoreFailed, StoreUnreachable
from actors.workspace import EVENTS
from app import idempotency
from app.appkeys import METRICS, POOL, SUPERVISOR, root_app
from app.auth import key_of, requires
from app.bodies import decode, read_body
from app.keys import KeyInfo
from app.responses import ApiError, invalid, iso_ms, json_response
from app.schemas import MAX_BATCH, BatchIn, EventIn
from app.timestamps import through
from app.views.params import cursor_param, int_param, page_response, text_param, time_param
from storage import events as event_store
from storage.events import EventRow
from storage.idempotency import Claim
from storage.ids import new_id

SINGLE_LIMIT = 64 * 1024
BATCH_LIMIT = 8 * 1024 * 1024


def _record(key: KeyInfo, event: EventIn, event_id: str, received: datetime) -> EventRow:
    return EventRow(event_id, key.workspace_id, key.env, event.event, event.at or received, received,
                    user_id=event.user_id, anonymous_id=event.anonymous_id, properties=event.properties)


async def commit(request: web.Request, key: KeyInfo, kind: str, items: list,
                 claim: Claim | None = None) -> Claim | None:
    """Hand items to the workspace actor and wait until they are durable. With an Idempotency-Key's claim:
    None when the key was new and the items are stored, else the key's earlier claim (nothing was stored)."""
    app = root_app(request)
    try:
        actor = app[SUPERVISOR].actor(("ws", key.workspace_id, key.env))
        return await actor.submit(kind, items, claim)
    except Overloaded as exc:
        app[METRICS].events_rejected.labels("overloaded").inc(len(items))
        raise ApiError(503, "overloaded", "the server is busy; retry shortly",
                       headers={"Retry-After": str(exc.retry_after)}) from None
    except StoreUnreachable as exc:
        app[METRICS].events_rejected.labels("unavailable").inc(len(items))
        raise ApiError(503, "unavailable", "the database is unreachable; retry shortly",
                       headers={"Retry-After": str(exc.retry_after)}) from None
    except StoreFailed:
        app[METRICS].events_rejected.labels("store_failed").inc(len(items))
        raise ApiError(500, "store_failed", "the event could not be stored; it was not recorded") from None


@requires("write", "events")
async def post_event(request: web.Request) -> web.Response:
    key = key_of(request)
    once = idempotency.idempotency_key(request)
    raw = await read_body(request, SINGLE_LIMIT)
    event = decode(raw, EventIn)
    received = datetime.now(UTC)
    event_id = new_id("evt")
    rows = [_record(key, event, event_id, received)]
    answer = {"id": event_id, "status": "received", "received_at": iso_ms(received)}
    if once is None:
        await commit(request, key, EVENTS, rows)
        return json_response(answer)
    claim = idempotency.claim(idempotency.SINGLE, once, raw, answer)
    return idempotency.respond(claim, await commit(request, key, EVENTS, rows, claim))


@requires("write", "events")
async def post_batch(request: web.Request) -> web.Response:
    key = key_of(request)
    once = idempotency.idempotency_key(request)
    raw = await read_body(request, BATCH_LIMIT)
    batch = decode(raw, BatchIn)
    if len(batch.events) > MAX_BATCH:
        raise invalid(f"a batch holds at most {MAX_BATCH} events, got {len(batch.events)}",
                      fields=[{"field": "events", "message": f"more than {MAX_BATCH} items"}])
    received = datetime.now(UTC)
    records, errors = [], []
    for index, raw in enumerate(batch.events):
        try:
            if len(raw) > SINGLE_LIMIT:  # an item is the single-event body, with that body's limit
                raise ApiError(413, "payload_too_large",
                               f"the event exceeds {SINGLE_LIMIT} bytes, the limit of one event")
            event = decode(bytes(raw), EventIn)
        except ApiError as exc:
            errors.append({"index": index, "code": exc.code, "message": exc.message})
            continue
        records.append(_record(key, event, new_id("evt"), received))
    if errors:
        request.config_dict[METRICS].events_rejected.labels("invalid").inc(len(errors))
    body: dict = {"received": len(records), "failed": len(errors)}
    if errors:
        body["errors"] = errors
    if once is not None:
        # Claimed even when every item failed: a retry gets the same answer, another body under the key a 409.
        claim = idempotency.claim(idempotency.BATCH, once, raw, body)
        return idempotency.respond(claim, await commit(request, key, EVENTS, records, claim))
    if records:
        await commit(request, key, EVENTS, records)
    return json_response(body)


def event_json(row) -> dict:
    return {
        "id": row["id"], "event": row["name"], "user_id": row["user_id"],
        "anonymous_id": row["anonymous_id"], "properties": row["properties"] or {},
        "timestamp": iso_ms(row["ts"]), "received_at": iso_ms(row["received_at"]),
    }


@requires("read", "query")
async def list_events(request: web.Request) -> web.Response:
    key = key_of(request)
    limit = int_param(request, "limit", 100, 1, 1000)
    to = time_param(request, "to")
    filters = {
        "event": text_param(request, "event"),
        "user_id": text_param(request, "user_id"),
        "anonymous_id": text_param(request, "anonymous_id"),
        "from": time_param(request, "from"),
        "to": through(to) if to else None,  # inclusive of the millisecond (app/timestamps.py)
    }
    after = None
    if cursor := cursor_param(request, str, str):
        try:
            after = (datetime.fromisoformat(cursor[0]), cursor[1])
        except ValueError:
            raise invalid("cursor is not valid", fields=[{"field": "cursor", "message": "not valid"}]) from None
    async with request.config_dict[POOL].acquire() as conn:
        rows = await event_store.list_events(
            conn, key.workspace_id, key.env, filters=filters, after=after, limit=limit + 1
        )
    return page_response(rows, limit, event_json, lambda r: (r["ts"].isoformat(), r["id"]))
