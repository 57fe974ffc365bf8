"""Dashboard sign-in: argon2 password hashes and an aiohttp-session cookie.

The cookie holds only a random id; the session's data lives in PostgreSQL (or, with REDIS_URL, in
Redis), so every process sees the same sessions and signing out ends a session on the server: a copied
cookie stops working. Signing in always starts a new id (no session fixation).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import asyncpg
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp_session import STORAGE_KEY, AbstractStorage, Session, get_session, new_session, session_middleware
from aiohttp_session.redis_storage import RedisStorage
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from redis.asyncio import Redis

from app.appkeys import POOL
from app.responses import SiteError
from app.settings import Settings
from storage import dashboard_sessions

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


@cache
def dummy_hash() -> str:
    """A hash of a random password with the current parameters, checked for unknown emails."""
    return _hasher.hash(secrets.token_urlsafe(16))


def needs_rehash(stored_hash: str) -> bool:
    return _hasher.check_needs_rehash(stored_hash)


def _new_key() -> str:
    return secrets.token_urlsafe(32)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class PostgresStorage(AbstractStorage):
    """Sessions in the dashboard_sessions table (the default, no-Redis mode)."""

    def __init__(self, pool: Callable[[], asyncpg.Pool], **cookie) -> None:
        super().__init__(**cookie)
        self._pool = pool  # the pool exists only once the app has started

    async def load_session(self, request: web.Request) -> Session:
        key = self.load_cookie(request)
        if key:
            async with self._pool().acquire() as conn:
                data = await dashboard_sessions.load(conn, _digest(key))
            if data is not None:
                try:
                    return Session(key, data=self._decoder(data), new=False, max_age=self.max_age)
                except ValueError:
                    pass
        return Session(None, data=None, new=True, max_age=self.max_age)

    async def save_session(self, request: web.Request, response: web.StreamResponse, session: Session) -> None:
        key = session.identity
        if session.empty:
            if key is not None:
                await self.forget(key)
            self.save_cookie(response, "", max_age=session.max_age)
            return
        async with self._pool().acquire() as conn:
            if key is None:
                key = _new_key()
                await dashboard_sessions.purge_expired(conn)
            data = self._encoder(self._get_session_data(session))
            await dashboard_sessions.save(conn, _digest(key), data, session.max_age or MAX_AGE)
        self.save_cookie(response, key, max_age=session.max_age)

    async def forget(self, key: str) -> None:
        async with self._pool().acquire() as conn:
            await dashboard_sessions.delete(conn, _digest(key))


class SharedRedisStorage(RedisStorage):
    """Sessions in Redis (REDIS_URL), with a way to end one on the server."""

    async def forget(self, key: str) -> None:
        await self._redis.delete(f"{self.cookie_name}_{key}")


def install(app: web.Application, settings: Settings, redis: Redis | None) -> None:
    cookie = {"cookie_name": COOKIE, "max_age": MAX_AGE, "httponly": True, "samesite": "Lax",
              "secure": settings.production}
    storage: PostgresStorage | SharedRedisStorage
    if redis is not None:
        storage = SharedRedisStorage(redis, key_factory=_new_key, **cookie)
    else:
        storage = PostgresStorage(lambda: app[POOL], **cookie)
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


async def _forget_current(request: web.Request) -> Session:
    """End the request's session on the server (if it has one) and return it."""
    session = await get_session(request)
    if session.identity is not None:
        await request[STORAGE_KEY].forget(str(session.identity))
    return session


async def sign_in(request: web.Request, account_id: int, email: str, workspace_id: int) -> None:
    # A fresh id: a cookie planted before sign-in (session fixation) never becomes the signed-in one.
    await _forget_current(request)
    session = await new_session(request)
    session["account_id"] = account_id
    session["email"] = email
    session["workspace_id"] = workspace_id


async def sign_out(request: web.Request) -> None:
    session = await _forget_current(request)
    session.invalidate()


async def current_account(request: web.Request) -> Account:
    """The signed-in account or a 401 in the site API's shape."""
    session = await get_session(request)
    account_id = session.get("account_id")
    if not isinstance(account_id, int):
        raise SiteError(401, "unauthorized")
    return Account(account_id, session.get("email", ""), session["workspace_id"])
