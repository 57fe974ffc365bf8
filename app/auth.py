"""Keyed-API access: bearer key, scope and per-key rate limit, with X-RateLimit-* headers on every
/v1 response (errors included)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from app import metrics
from app.appkeys import KEYS, LIMITER, SETTINGS
from app.keys import KeyInfo
from app.net import client_ip
from app.plans import ANONYMOUS, limits_for
from app.responses import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def requires(scope: str | tuple[str, ...], group: str) -> Callable[[Handler], Handler]:
    """Mark a /v1 handler with the scope(s) it needs, all of them, and the rate-limit group it counts
    against."""
    scopes = (scope,) if isinstance(scope, str) else scope

    def mark(handler: Handler) -> Handler:
        handler.tally_scope = scopes  # type: ignore[attr-defined]
        handler.tally_group = group  # type: ignore[attr-defined]
        return handler

    return mark


KEY_INFO: web.RequestKey[KeyInfo] = web.RequestKey("key_info", KeyInfo)


def key_of(request: web.Request) -> KeyInfo:
    return request[KEY_INFO]


def auth_scheme(request: web.Request) -> str:
    """The Authorization header's scheme, lower-cased ("bearer", "basic", or "" without one)."""
    return request.headers.get("Authorization", "").partition(" ")[0].lower()


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


@web.middleware
async def keyed_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/v1/") and request.path != "/v1":
        return await handler(request)
    app = request.app
    target = request.match_info.handler
    # Segment tracking calls carry a write key, not a Tally key: app.views.segment authenticates and
    # rate-limits them itself. POST /v1/identify is Tally's only when the scheme is Bearer.
    own_auth = getattr(target, "tally_segment", None)
    if own_auth == "always" or (own_auth == "unless_bearer" and auth_scheme(request) != "bearer"):
        return await handler(request)
    scopes = getattr(target, "tally_scope", ())
    group = getattr(target, "tally_group", "query")

    raw = _bearer(request)
    key = await app[KEYS].lookup(raw) if raw else None
    if key is None:
        bucket, limits = f"ip:{client_ip(request, app[SETTINGS].trusted_proxies)}", ANONYMOUS
    else:
        bucket, limits = f"key:{key.id}:{group}", limits_for(key.plan, group, key.custom_limits)
    verdict = await app[LIMITER].hit(bucket, limits)
    headers = verdict.headers()
    try:
        if not verdict.allowed:
            if group == "events":
                metrics.EVENTS_REJECTED.labels("rate_limited").inc()
            raise ApiError(429, "rate_limited", "rate limit exceeded; retry after the Retry-After seconds")
        if key is None:
            message = "invalid or expired API key" if raw else "missing Authorization: Bearer <API key>"
            raise ApiError(401, "unauthorized", message)
        missing = [s for s in scopes if s not in key.scopes]
        if missing:
            raise ApiError(403, "forbidden", f"this key lacks the '{missing[0]}' scope")
        request[KEY_INFO] = key
        response = await handler(request)
    except ApiError as exc:
        exc.headers.update(headers)
        raise
    except web.HTTPException as exc:
        exc.headers.update(headers)
        raise
    response.headers.update(headers)
    return response
