"""Dashboard sign-in: argon2 password hashes and an aiohttp-session cookie.

The cookie holds only a random id; the session's data lives in PostgreSQL (or, with REDIS_URL, in
Redis), so every process sees the same sessions and signing out ends a session on the server: a copied
cookie stops working. Signing in always starts a new id (no session fixation).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import asyncpg
from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp_session import STORAGE_KEY, AbstractStorage, Session, get_session, new_session, session_middleware
from aiohttp_session.redis_storage import RedisStorage
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from redis.asyncio import Redis

from app.appkeys import OUTAGES, POOL, REDIS
from app.responses import SiteError
from app.settings import Settings
from common.outages import Outages, ask_redis
from storage import dashboard_sessions

COOKIE = "tally_session"
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
    """Sessions in Redis (REDIS_URL), with a way to end one on the server. The client and the outage book are
    the app's, which exist only once the app has started (app/server.py): they are looked up per call. Each call
    goes through common.outages.ask_redis: a stalled or down Redis answers the request 503 within a second, or
    at once. A request without a session cookie never asks Redis to read one."""

    def __init__(self, redis: Callable[[], Redis], outages: Callable[[], Outages], **cookie) -> None:
        super().__init__(Redis(), **cookie)  # a client that never connects, for the base class's type check
        self._redis_of = redis
        self._outages = outages

    @property
    def _redis(self) -> Redis:
        return self._redis_of()

    @_redis.setter
    def _redis(self, value: Redis) -> None:
        pass  # the base class's __init__ stores its placeholder here

    async def load_session(self, request: web.Request) -> Session:
        if self.load_cookie(request) is None:
            return await super().load_session(request)
        return await ask_redis(self._outages(), super().load_session(request))

    async def save_session(self, request: web.Request, response: web.StreamResponse, session: Session) -> None:
        await ask_redis(self._outages(), super().save_session(request, response, session))

    async def forget(self, key: str) -> None:
        await ask_redis(self._outages(), self._redis.delete(f"{self.cookie_name}_{key}"))


def storage_for(app: web.Application, settings: Settings) -> AbstractStorage:
    cookie = {"cookie_name": COOKIE, "max_age": MAX_AGE, "httponly": True, "samesite": "Lax",
              "secure": settings.production}
    if settings.redis_url:
        return SharedRedisStorage(lambda: app[REDIS], lambda: app[OUTAGES], key_factory=_new_key, **cookie)
    return PostgresStorage(lambda: app[POOL], **cookie)


def middleware(storage: AbstractStorage) -> Middleware:
    """aiohttp-session's middleware over this storage. It is not a layer of its own: the root's layer
    runs it for the root's own routes (the pages) and the /api layer for every /api handler but
    ingestion (app/middlewares.py), so /v1 never reads a dashboard session and the tracker's hot path
    skips it."""
    return session_middleware(storage)


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


async def end_account_sessions(conn: asyncpg.Connection, redis_url: str | None, account_id: int) -> int:
    """End every signed-in session of an account, wherever sessions live (a password reset: a session
    opened with the old password must not outlive it). Redis keeps no index by account, so its session
    keys are scanned; resets are rare and made from the command line."""
    ended = await dashboard_sessions.delete_for_account(conn, account_id)
    if redis_url:
        redis = Redis.from_url(redis_url)
        try:
            async for key in redis.scan_iter(match=f"{COOKIE}_*", count=1000):
                data = await redis.get(key)
                try:
                    owner = json.loads(data)["session"]["account_id"] if data else None
                except (ValueError, KeyError, TypeError):
                    continue
                if owner == account_id:
                    ended += await redis.delete(key)
        finally:
            await redis.aclose()
    return ended
