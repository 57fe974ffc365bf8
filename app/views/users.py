"""POST /v1/identify and the user-profile endpoints, including right-to-erasure."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from aiohttp import web

from actors.workspace import IDENTIFY
from app.appkeys import POOL
from app.auth import key_of, requires
from app.bodies import decode, read_body
from app.responses import invalid, iso_ms, json_response, not_found
from app.schemas import IdentifyIn
from app.views.analytics_params import caught_up
from app.views.events import SINGLE_LIMIT, commit
from app.views.params import cursor_param, int_param, page_response, storable_param
from storage import events as event_store
from storage import users as user_store
from storage.bounded_pool import bounded_by
from storage.db import COMMAND_TIMEOUT_SECONDS

log = logging.getLogger("tally.users")
# The bound of an erasure's PostgreSQL work (a query, a wait for a connection): the command timeout it always had.
ERASURE_SECONDS = COMMAND_TIMEOUT_SECONDS
_TRAIT = re.compile(r"^trait\[(.{1,255})\]\Z")


@requires("write", "identify")
async def identify(request: web.Request) -> web.Response:
    key = key_of(request)
    body = decode(await read_body(request, SINGLE_LIMIT), IdentifyIn)
    received = datetime.now(UTC)
    await commit(request, key, IDENTIFY,
                 [(body.user_id, body.traits, body.at or received, body.anonymous_id, received)])
    return json_response({"id": body.user_id, "status": "identified", "received_at": iso_ms(received)})


def profile_json(row) -> dict:
    return {
        "id": row["user_id"], "traits": row["traits"], "created_at": iso_ms(row["created_at"]),
        "last_seen_at": iso_ms(row["last_seen_at"]), "event_count": row["event_count"],
    }


def _trait_filters(request: web.Request) -> dict[str, str]:
    """The trait[<key>]=value filters. A parameter that looks meant as one but is not (traits[k], trait[k,
    trait[], a key past 255 characters) or one key given twice is a 400: ignored, it would list every user."""
    traits: dict[str, str] = {}
    for name, value in request.query.items():
        match = _TRAIT.match(name)
        if match is None and name.lower().startswith("trait"):
            raise invalid(f"{name[:300]}: not a filter; filter on a trait with trait[<key>]=<value>",
                          fields=[{"field": name[:300], "message": "not trait[<key>]"}])
        if match is None:
            continue
        if match.group(1) in traits:
            raise invalid(f"{name}: given twice; a trait can equal one value",
                          fields=[{"field": name, "message": "given twice"}])
        traits[match.group(1)] = storable_param(name, value)
    return traits


@requires("read", "query")
async def list_users(request: web.Request) -> web.Response:
    key = key_of(request)
    limit = int_param(request, "limit", 100, 1, 1000)
    traits = _trait_filters(request)
    (after,) = cursor_param(request, int) or (0,)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await user_store.list_profiles(
            conn, key.workspace_id, key.env, trait_filters=traits, after_seq=after, limit=limit + 1
        )
    return page_response(rows, limit, profile_json, lambda r: (r["seq"],))


@requires("read", "query")
async def get_user(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await user_store.get_profile(conn, key.workspace_id, key.env, request.match_info["user_id"])
    if row is None:
        raise not_found("no user with that id")
    return json_response(profile_json(row))


@requires("admin", "admin")
async def delete_user(request: web.Request) -> web.Response:
    key = key_of(request)
    # Deleting every event of a user may rightly take longer than a request's bound on PostgreSQL: cut there, the
    # erasure would be rolled back on every retry. It keeps the command timeout it always had, as a bound, so a
    # stalled PostgreSQL still answers 503.
    with bounded_by(ERASURE_SECONDS):
        async with request.config_dict[POOL].acquire() as conn:
            await event_store.erase_user(
                conn, key.workspace_id, key.env, request.match_info["user_id"], datetime.now(UTC)
            )
    # Apply it to the analytics store now. Should that fail, or wait past the report timeout (a backlog after
    # an upgrade), the erasure stays queued, and every analytics read applies the queue before it reads (or
    # answers 503), so no read returns the user's events either way.
    try:
        if not await caught_up(request):
            log.warning("the analytics store is behind its mirror: the erasure stays queued, applied before any read")
    except Exception:
        log.exception("applying an erasure to the analytics store failed; it stays queued")
    return web.Response(status=204)
