"""The HTTP edge of the dependency policy (common/outages.py): a request that finds PostgreSQL, Redis or the
ClickHouse server unreachable, or the analytics store too far behind its mirror, answers 503 with Retry-After in
its API's shape, never a 500 with a traceback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from redis.exceptions import RedisError

from app.responses import json_response
from common.outages import (
    ANALYTICS,
    ANALYTICS_UNREACHABLE,
    POSTGRES,
    POSTGRES_UNREACHABLE,
    REDIS,
    REDIS_UNREACHABLE,
    RETRY_AFTER_SECONDS,
)


def unavailable(dependency: str, site: bool) -> web.Response:
    """503 {"error": "service unavailable"} on /api, 503 {"error": {"code": "unavailable", ...}}
    elsewhere, both with Retry-After."""
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if site:
        return json_response({"error": "service unavailable"}, 503, headers)
    message = f"a storage dependency ({dependency}) is unreachable; retry shortly"
    return json_response({"error": {"code": "unavailable", "message": message}}, 503, headers)


# Every analytics read first waits for the store to hold the events committed before it (read-your-writes).
# When that wait outlasts the report timeout (a backlog after an upgrade, a rebuild or an outage; a lock), the
# read's own size is not the cause: the same read passes once the store has caught up.
MIRROR_BEHIND = ("the analytics store is still mirroring events committed before this request (a backlog after "
                 "an upgrade, a rebuild or an outage); retry shortly")
MIRROR_BEHIND_RETRY = {"Retry-After": "10"}


class MirrorBehind(Exception):
    """A read's wait for the analytics mirror outlasted its bound; each API's layer renders it (mirror_behind)."""


def mirror_behind(site: bool) -> web.Response:
    """503 with Retry-After: {"error": MIRROR_BEHIND} on /api, {"error": {"code": "unavailable", …}} elsewhere."""
    if site:
        return json_response({"error": MIRROR_BEHIND}, 503, MIRROR_BEHIND_RETRY)
    return json_response({"error": {"code": "unavailable", "message": MIRROR_BEHIND}}, 503, MIRROR_BEHIND_RETRY)


async def store_caught_up(catch_up: Callable[[], Awaitable[object]]) -> bool:
    """Run the mirror's catch-up (`catch_up`): False when the store refuses it (its disk full, its server away),
    which leaves it behind until it takes inserts again, as a backlog does (the mirror logs why, once).
    PostgreSQL unreachable raises, that outage's own 503. The caller bounds the wait."""
    try:
        await catch_up()
    except Exception as exc:
        if unreachable(exc) is not None:
            raise
        return False
    return True


def unreachable(exc: BaseException) -> str | None:
    """The dependency an exception says is unreachable, or None if it says something else."""
    if isinstance(exc, RedisError):
        return REDIS if isinstance(exc, REDIS_UNREACHABLE) else None
    if isinstance(exc, POSTGRES_UNREACHABLE):
        return POSTGRES
    if isinstance(exc, ANALYTICS_UNREACHABLE):
        return ANALYTICS
    return None
