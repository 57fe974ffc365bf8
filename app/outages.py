"""The HTTP edge of the dependency policy (common/outages.py): a request that finds PostgreSQL or Redis
unreachable, or the analytics store too far behind its mirror, answers 503 with Retry-After in its API's
shape, never a 500 with a traceback."""

from __future__ import annotations

from aiohttp import web
from redis.exceptions import RedisError

from app.responses import json_response
from common.outages import POSTGRES, POSTGRES_UNREACHABLE, REDIS, REDIS_UNREACHABLE, RETRY_AFTER_SECONDS


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


def unreachable(exc: BaseException) -> str | None:
    """The dependency an exception says is unreachable, or None if it says something else."""
    if isinstance(exc, RedisError):
        return REDIS if isinstance(exc, REDIS_UNREACHABLE) else None
    if isinstance(exc, POSTGRES_UNREACHABLE):
        return POSTGRES
    return None
