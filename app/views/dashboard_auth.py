"""POST /api/auth/login, POST /api/auth/logout, GET /api/auth/me."""

from __future__ import annotations

import asyncio

from aiohttp import web

from app import dashboard_session as ds
from app.appkeys import LIMITER, POOL, SETTINGS
from app.bodies import decode_site_json, read_site_body
from app.net import client_ip
from app.responses import SiteError, json_response
from storage import accounts

BODY_LIMIT = 16 * 1024  # an email and a password, with room to spare
# Attempts (per second, per minute) per client address, per (address, email) and per email: slows
# guessing one password and spraying many emails from one address, while an office behind one address
# still has room for its people's typos.
LOGIN_LIMITS = {"ip": (10, 30), "ip_email": (5, 20), "email": (10, 60)}


async def _credentials(request: web.Request) -> tuple[str, str]:
    # JSON only (the site spec names no form here): a cross-site HTML form cannot send it.
    if request.content_type != "application/json":
        raise SiteError(415, "content-type must be application/json")
    data = decode_site_json(await read_site_body(request, BODY_LIMIT))
    if not isinstance(data, dict):
        raise SiteError(400, "invalid payload", issues=["body must be an object"])
    email, password = data.get("email"), data.get("password")
    issues = [f"{name} is required" for name, value in (("email", email), ("password", password))
              if not isinstance(value, str) or not value]
    issues += [f"{name} may not contain U+0000" for name, value in (("email", email), ("password", password))
               if isinstance(value, str) and "\x00" in value]
    if issues:
        raise SiteError(400, "invalid payload", issues=issues)
    return email.strip().lower(), password


def _verify(account, password: str) -> bool:
    if account is None:
        ds.check_password(ds.dummy_hash(), password)  # the first call also makes the dummy hash, off the loop
        return False
    return ds.check_password(account["password_hash"], password)


async def login(request: web.Request) -> web.Response:
    email, password = await _credentials(request)
    limiter = request.config_dict[LIMITER]
    ip = client_ip(request, request.config_dict[SETTINGS].trusted_proxies)
    for bucket, limits in ((f"login-ip:{ip}", LOGIN_LIMITS["ip"]),
                           (f"login:{ip}:{email}", LOGIN_LIMITS["ip_email"]),
                           (f"login:{email}", LOGIN_LIMITS["email"])):
        verdict = await limiter.hit(bucket, limits)
        if not verdict.allowed:
            raise SiteError(429, "too many login attempts", headers={"Retry-After": str(verdict.retry_after)})
    async with request.config_dict[POOL].acquire() as conn:
        account = await accounts.account_by_email(conn, email)
    # Hashing runs in a thread: argon2 is deliberately slow and must not stall the event loop. An unknown email is
    # checked against a dummy hash of the same cost, so timing does not tell which emails have accounts. No pool
    # connection is held meanwhile: sign-ins from many addresses at once (each within its limits) queue for the
    # few worker threads, and held, their connections were every other request's.
    if not await asyncio.to_thread(_verify, account, password):
        raise SiteError(401, "invalid email or password")
    rehashed = None
    if ds.needs_rehash(account["password_hash"]):
        rehashed = await asyncio.to_thread(ds.hash_password, password)
    async with request.config_dict[POOL].acquire() as conn:
        workspaces = await accounts.workspaces_of(conn, account["id"])
        if rehashed is not None:
            await accounts.set_password_hash(conn, account["id"], rehashed)
    if not workspaces:
        raise SiteError(401, "invalid email or password")
    await ds.sign_in(request, account["id"], email, workspaces[0]["id"])
    return json_response(account_json(email, workspaces[0]["id"], workspaces))


async def logout(request: web.Request) -> web.Response:
    await ds.sign_out(request)
    return json_response({"status": "signed_out"})


async def me(request: web.Request) -> web.Response:
    account = await ds.current_account(request)
    async with request.config_dict[POOL].acquire() as conn:
        workspaces = await accounts.workspaces_of(conn, account.id)
    return json_response(account_json(account.email, account.workspace_id, workspaces))


def account_json(email: str, active_id: int, workspaces: list) -> dict:
    """One shape for login and /api/auth/me: the active workspace, and every workspace the account is in."""
    listed = [{"id": w["id"], "name": w["name"], "plan": w["plan"]} for w in workspaces]
    active = next((w for w in listed if w["id"] == active_id), None)
    return {"email": email, "workspace": active, "workspaces": listed}
