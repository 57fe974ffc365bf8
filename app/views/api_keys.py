"""Session-authenticated API-key management for the dashboard: GET/POST /api/keys, DELETE /api/keys/{key_id}.

Keys belong to the signed-in account's active workspace. A key's value is returned once, by the create
call; listings show only its prefix. Revocation clears this process's key cache at once; other processes
stop accepting the key within `key_cache_seconds`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

import asyncpg
import msgspec
from aiohttp import web
from msgspec import Meta

from app.appkeys import KEYS, POOL
from app.bodies import field_of, read_site_body
from app.dashboard_session import current_account
from app.input_rules import decode_json, storable_text
from app.keys import SCOPES, create_key
from app.responses import SiteError, invalid_payload, iso_ms, issue, json_response
from app.timestamps import has_utc_time, parse_timestamp
from storage import workspaces as store

MAX_BODY = 16 * 1024


class KeyIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1, max_length=64)]
    scopes: Annotated[list[Literal["read", "write", "admin"]], Meta(min_length=1)]
    test: bool = False
    expiresAt: str | None = None  # ISO 8601 with a zone, read by app/timestamps.py as every API timestamp


def key_json(row: asyncpg.Record) -> dict:
    if row["revoked_at"] is not None:
        status = "revoked"
    elif row["expires_at"] is not None and row["expires_at"] <= datetime.now(UTC):
        status = "expired"
    else:
        status = "active"
    return {
        "id": row["id"], "name": row["name"], "env": row["env"], "scopes": list(row["scopes"]),
        "prefix": row["prefix"], "status": status, "createdAt": iso_ms(row["created_at"]),
        "expiresAt": iso_ms(row["expires_at"]), "revokedAt": iso_ms(row["revoked_at"]),
    }


def _invalid(field: str, message: str) -> SiteError:
    return invalid_payload([issue(field, message)])


def _parse(body: bytes) -> tuple[KeyIn, datetime | None]:
    """The body and its expiry."""
    try:
        data = decode_json(body, type=KeyIn)
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        raise _invalid(field, message.strip()) from None
    except msgspec.DecodeError:
        raise SiteError(400, "invalid json") from None
    expires = None
    if data.expiresAt is not None:
        try:
            expires = parse_timestamp(data.expiresAt)
        except ValueError:
            raise _invalid("expiresAt", "must be an ISO 8601 date-time with a timezone") from None
        if expires.tzinfo is None:
            raise _invalid("expiresAt", "needs a timezone")
        if not has_utc_time(expires):
            raise _invalid("expiresAt", "is out of range: in UTC it falls outside the years 1 to 9999")
        if expires <= datetime.now(UTC):
            raise _invalid("expiresAt", "must be in the future")
    data.name = data.name.strip()
    if not data.name:
        raise _invalid("name", "must not be blank")
    if not storable_text(data.name):
        raise _invalid("name", "may not contain the NUL character (\\u0000)")
    return data, expires


async def list_keys(request: web.Request) -> web.Response:
    account = await current_account(request)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.list_keys(conn, account.workspace_id)
    # Newest first, as a dashboard list reads best.
    return json_response({"keys": [key_json(r) for r in reversed(rows)]})


async def create(request: web.Request) -> web.Response:
    account = await current_account(request)
    # JSON only: a cross-site HTML form cannot send it, on top of the SameSite=Lax session cookie.
    if request.content_type != "application/json":
        raise SiteError(415, "content-type must be application/json")
    data, expires = _parse(await read_site_body(request, MAX_BODY))
    async with request.config_dict[POOL].acquire() as conn:
        workspace = await store.workspace_name(conn, account.workspace_id)
        if workspace is None:
            raise SiteError(401, "unauthorized")
        key_id, raw = await create_key(
            conn, workspace=workspace, scopes=[s for s in SCOPES if s in data.scopes], test=data.test, name=data.name,
            expires_at=expires,
        )
        row = await store.workspace_key(conn, account.workspace_id, key_id)
    return json_response({**key_json(row), "key": raw}, 201, {"Cache-Control": "no-store"})


async def revoke(request: web.Request) -> web.Response:
    account = await current_account(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.revoke_workspace_key(conn, account.workspace_id, request.match_info["key_id"])
    if row is None:
        raise SiteError(404, "key not found")
    request.config_dict[KEYS].forget_all()
    return json_response(key_json(row))


def setup_api_key_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/keys", list_keys)
    router.add_post("/keys", create)
    router.add_delete("/keys/{key_id}", revoke)
