"""Dashboard sign-in: argon2 password hashes and an aiohttp-session cookie.

The cookie is encrypted with a key derived from TALLY_SECRET, or (with REDIS_URL) holds only an id
whose data lives in Redis, so every process sees the same sessions.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp_session import get_session, session_middleware
from aiohttp_session.cookie_storage import EncryptedCookieStorage
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from redis.asyncio import Redis

from app.responses import SiteError
from app.settings import Settings

COOKIE = "tally_session"
SESSIONLESS_PREFIXES = ("/v1/", "/api/service/")
SESSIONLESS_PATHS = frozenset({"/api/event"})  # Plausible's ingestion path
MAX_AGE = 30 * 24 * 3600
_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def check_password(stored_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(stored_hash: str) -> bool:
    return _hasher.check_needs_rehash(stored_hash)


def install(app: web.Application, settings: Settings, redis: Redis | None) -> None:
    cookie = {"cookie_name": COOKIE, "max_age": MAX_AGE, "httponly": True, "samesite": "Lax",
              "secure": settings.production}
    if redis is not None:
        from aiohttp_session.redis_storage import RedisStorage

        storage = RedisStorage(redis, key_factory=lambda: secrets.token_urlsafe(32), **cookie)
    else:
        key = hashlib.sha256(b"tally-session:" + settings.secret.encode()).digest()
        storage = EncryptedCookieStorage(key, **cookie)
    sessions = session_middleware(storage)

    @web.middleware
    async def dashboard_sessions(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The keyed API and the tracker's ingestion never read a dashboard session: skip the session
        # layer on those hot paths.
        if request.path.startswith(SESSIONLESS_PREFIXES) or request.path in SESSIONLESS_PATHS:
            return await handler(request)
        return await sessions(request, handler)

    app.middlewares.append(dashboard_sessions)


@dataclass(frozen=True, slots=True)
class Account:
    id: int
    email: str
    workspace_id: int


async def sign_in(request: web.Request, account_id: int, email: str, workspace_id: int) -> None:
    session = await get_session(request)
    session.invalidate()
    session = await get_session(request)
    session["account_id"] = account_id
    session["email"] = email
    session["workspace_id"] = workspace_id


async def sign_out(request: web.Request) -> None:
    session = await get_session(request)
    session.invalidate()


async def current_account(request: web.Request) -> Account:
    """The signed-in account or a 401 in the site API's shape."""
    session = await get_session(request)
    account_id = session.get("account_id")
    if not isinstance(account_id, int):
        raise SiteError(401, "unauthorized")
    return Account(account_id, session.get("email", ""), session["workspace_id"])
