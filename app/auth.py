"""Who may call what. /v1 (a sub-application, app/routes.py): bearer key, scope and per-key rate limit,
with X-RateLimit-* headers on every /v1 response (errors included); every /v1 handler declares its
scope with @requires (or its own authentication, as Segment's write-keyed calls do) or the app refuses
to start. /api: handlers marked @ingestion are key-less and session-less and admit any page's origin, those marked
@bearer_keyed take a Tally key instead of the session; every other /api handler runs under the dashboard
session and the same-origin rule."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from app.appkeys import KEYS, LIMITER, METRICS, SETTINGS, root_app
from app.input_rules import storable_path_ids
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


def ingestion(handler: Handler) -> Handler:
    """Mark an /api handler as key-less event ingestion: no dashboard session, no same-origin rule."""
    handler.tally_ingestion = True  # type: ignore[attr-defined]
    return handler


def bearer_keyed(handler: Handler) -> Handler:
    """Mark an /api handler as authenticated by a Tally key it checks itself (admit): no dashboard session
    and no same-origin rule, which guard cookies; Plausible's Stats API reads."""
    handler.tally_bearer = True  # type: ignore[attr-defined]
    return handler


def is_sessionless(request: web.Request) -> bool:
    """Whether an /api handler reads no dashboard session: ingestion, or a Tally key's read."""
    target = request.match_info.handler
    return getattr(target, "tally_ingestion", False) or getattr(target, "tally_bearer", False)


def declared_access(handler: Handler) -> str | None:
    """How a /v1 handler authenticates, as declared: "scope:<scopes>" (Tally key), "segment" (write key,
    Segment's calls), "segment|scope:<scopes>" (either, by scheme); None when it declares nothing."""
    scopes = getattr(handler, "tally_scope", ())
    own = getattr(handler, "tally_segment", None)
    tally = "scope:" + ",".join(scopes) if scopes else None
    if own == "always":
        return "segment"
    if own == "unless_bearer" and tally:
        return "segment|" + tally
    return tally


def refuse_undeclared(v1: web.Application) -> None:
    """Fail closed: a /v1 handler without a declared scope would accept any valid key. Raised while the
    app is built, so such a server never starts."""
    for route in v1.router.routes():
        if declared_access(route.handler) is None:
            raise RuntimeError(f"/v1 route {route.method} {route.resource.canonical if route.resource else '?'} "
                               "declares no scope: decorate its handler with @requires(...)")


KEY_INFO: web.RequestKey[KeyInfo] = web.RequestKey("key_info", KeyInfo)
# A keyed request's X-RateLimit-* headers, for the root layer to add to a failure it renders (a 500 or 503).
RATE_HEADERS: web.RequestKey[dict] = web.RequestKey("rate_headers", dict)


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


def _path_ids_or_404(request: web.Request) -> None:
    if not storable_path_ids(request.match_info.values()):
        raise ApiError(404, "not_found", "not found")


async def admit(request: web.Request, scopes: tuple[str, ...], group: str) -> KeyInfo:
    """The request's bearer key, once its `group`'s rate limit admits the request (the key's limit, or the
    client address's without a valid key) and the key holds every one of `scopes`. The limit's headers are
    left in request[RATE_HEADERS] for the response, whatever it is; 429, 401 and 403 are ApiErrors."""
    app = root_app(request)
    raw = _bearer(request)
    key = await app[KEYS].lookup(raw) if raw else None
    if key is None:
        bucket, limits = f"ip:{client_ip(request, app[SETTINGS].trusted_proxies)}", ANONYMOUS
    else:
        bucket, limits = f"key:{key.id}:{group}", limits_for(key.plan, group, key.custom_limits)
    verdict = await app[LIMITER].hit(bucket, limits)
    request[RATE_HEADERS] = verdict.headers()
    if not verdict.allowed:
        if group == "events":
            app[METRICS].events_rejected.labels("rate_limited").inc()
        raise ApiError(429, "rate_limited", "rate limit exceeded; retry after the Retry-After seconds")
    if key is None:
        message = "invalid or expired API key" if raw else "missing Authorization: Bearer <API key>"
        raise ApiError(401, "unauthorized", message)
    missing = [s for s in scopes if s not in key.scopes]
    if missing:
        raise ApiError(403, "forbidden", f"this key lacks the '{missing[0]}' scope")
    return key


@web.middleware
async def keyed_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The /v1 sub-application's one layer (app/middlewares.py says why one): key, scope, rate limit and
    its headers, then path ids (app/input_rules.py). Failures are rendered by the root's layer."""
    target = request.match_info.handler
    # Segment tracking calls carry a write key, not a Tally key: app.views.segment authenticates and
    # rate-limits them itself. POST /v1/identify is Tally's only when the scheme is Bearer.
    own_auth = getattr(target, "tally_segment", None)
    if own_auth == "always" or (own_auth == "unless_bearer" and auth_scheme(request) != "bearer"):
        _path_ids_or_404(request)
        return await handler(request)
    scopes = getattr(target, "tally_scope", ())
    group = getattr(target, "tally_group", "query")
    try:
        request[KEY_INFO] = await admit(request, scopes, group)
        _path_ids_or_404(request)
        response = await handler(request)
    except (ApiError, web.HTTPException) as exc:
        exc.headers.update(request.get(RATE_HEADERS, {}))
        raise
    response.headers.update(request[RATE_HEADERS])
    return response
