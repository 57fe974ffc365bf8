"""Request metrics and error rendering: every failure leaves as JSON in its API's shape.

Each application has one middleware layer (the root's, /v1's in app/auth.py, /api's below): every
request awaits one coroutine per layer, and aiohttp adds one more per application on the way, so the
concerns of an application run as steps of its one layer rather than as a layer each."""

from __future__ import annotations

import logging
import time

from aiohttp import web
from aiohttp.typedefs import Middleware

from app.appkeys import METRICS, OUTAGES, root_app
from app.auth import RATE_HEADERS, Handler, is_sessionless
from app.bodies import unreadable
from app.input_rules import storable_path_ids
from app.outages import MirrorBehind, mirror_behind, unavailable, unreachable
from app.responses import ApiError, SiteError, json_response
from app.same_origin import refuse_cross_origin
from app.shared_access import refuse_token_elsewhere
from common.outages import DependencyDown
from storage.bounded_pool import CALL_BOUND
from storage.clickhouse import QueryTooLarge, QueryTooSlow

log = logging.getLogger("tally.http")

READ_TOO_LARGE = ("this read needs more memory than the analytics store allows one query; narrow the range or the "
                  "filters, or ask the operator to raise TALLY_ANALYTICS_MAX_MEMORY_MB")
READ_TOO_SLOW = ("this read took longer than the analytics store allows one query; narrow the range or the "
                 "filters, or ask the operator to raise TALLY_ANALYTICS_READ_TIMEOUT_SECONDS")
# Reads the store stopped at a bound of the operator's: status, the site API's error, the keyed API's code, the
# detail, and the bound as logged.
_OVER_BOUNDS = (
    (QueryTooLarge, 500, "read too large", "read_too_large", READ_TOO_LARGE,
     "memory bound (TALLY_ANALYTICS_MAX_MEMORY_MB)"),
    (QueryTooSlow, 504, "read timed out", "read_timeout", READ_TOO_SLOW,
     "time bound (TALLY_ANALYTICS_READ_TIMEOUT_SECONDS)"),
)

_CODES = {
    400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type",
    429: "rate_limited", 503: "unavailable",
}


def _route_name(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _count(request: web.Request, status: int, started: float) -> None:
    # Any token is a valid HTTP method: fold the unusual ones so clients cannot mint label values.
    method = request.method if request.method in _METHODS else "OTHER"
    counter, latency = root_app(request)[METRICS].route(method, _route_name(request), status)
    counter.inc()
    latency.observe(time.perf_counter() - started)


def _render_http_exception(request: web.Request, exc: web.HTTPException, site: bool) -> web.Response:
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    message = exc.reason if exc.status != 404 else f"no route for {request.method} {request.path}"
    if site:
        return json_response({"error": message.lower()}, exc.status, headers)
    code = _CODES.get(exc.status, "error")
    return json_response({"error": {"code": code, "message": message}}, exc.status, headers)


def _render_unexpected(request: web.Request, exc: Exception, site: bool) -> web.Response:
    """An unreachable dependency, or the analytics store behind its mirror, is a 503 (an outage logged once);
    anything else a logged 500."""
    if isinstance(exc, MirrorBehind):
        return mirror_behind(site)
    for kind, status, site_error, code, detail, bound in _OVER_BOUNDS:
        if isinstance(exc, kind):
            # Not a bug (no traceback): the operator's bound is too small for this read, which fails again as it is.
            log.warning("analytics read over the store's per-query %s method=%s path=%s: %s", bound, request.method,
                        request.path, str(exc).splitlines()[0][:300])
            if site:
                return json_response({"error": site_error, "detail": detail}, status)
            return json_response({"error": {"code": code, "message": detail}}, status)
    if isinstance(exc, ConnectionError) and request.transport is None:
        # The client hung up mid-request: aiohttp ends the read of its body with a ConnectionResetError, as a
        # PostgreSQL connection reset ends a query. Nothing of ours is down, and nobody reads this answer.
        return _client_gone(site)
    if isinstance(exc, DependencyDown):
        return unavailable(exc.dependency, site)
    dependency = unreachable(exc)
    if dependency is not None:
        root_app(request)[OUTAGES].down(dependency, exc, "requests that need it answer 503")
        return unavailable(dependency, site)
    log.exception("unhandled error method=%s path=%s", request.method, request.path)
    if site:
        return json_response({"error": "internal error"}, 500)
    return json_response({"error": {"code": "internal_error", "message": "internal server error"}}, 500)


def _client_gone(site: bool) -> web.Response:
    message = "the connection closed before the request ended"
    if site:
        return json_response({"error": message}, 400)
    return json_response({"error": {"code": "invalid_request", "message": message}}, 400)


def root_middleware(sessions: Middleware, postgres_bound: float) -> Middleware:
    """The root application's layer, in this order: request metrics (every request, whatever its
    application), failures as JSON in the keyed shape {"error": {"code", "message"}} (the root's routes
    and /v1, whose layer adds its rate-limit headers first; /api renders its own), and the dashboard
    session for the root's own routes (the pages) only: a request routed into a sub-application is left
    to that one, so /v1 never reads a dashboard session. Every request's PostgreSQL queries and waits for a
    connection of the main pool are bounded by `postgres_bound` (storage/bounded_pool.py)."""

    @web.middleware
    async def root(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        bound = CALL_BOUND.set(postgres_bound)
        try:
            try:
                if len(request.match_info.apps) > 1:
                    response = await handler(request)
                else:
                    response = await sessions(request, handler)
            except (ApiError, SiteError) as exc:
                response = exc.response()
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = _render_http_exception(request, exc, False)
            except Exception as exc:
                response = _render_unexpected(request, exc, False)
                response.headers.update(request.get(RATE_HEADERS, {}))  # spec §8: failures carry them too
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            CALL_BOUND.reset(bound)
            _count(request, status, started)

    return root


def site_api_middleware(sessions: Middleware) -> Middleware:
    """The /api sub-application's layer, in this order: failures as JSON in the site API's flat shape
    {"error": "..."}, the same-origin rule (app/same_origin.py), a shared link's token only where a
    handler is @shareable (app/shared_access.py), path ids, and the dashboard session.
    Key-less ingestion (handlers marked @ingestion) skips the same-origin rule and the session: any page
    may send events, and the tracker's hot path reads no session. So do reads by a Tally key (@bearer_keyed),
    which carry no cookie to guard."""

    @web.middleware
    async def site_api(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            sessionless = is_sessionless(request)
            if not sessionless:
                refuse_cross_origin(request)
                refuse_token_elsewhere(request)
            if not storable_path_ids(request.match_info.values()):
                raise SiteError(404, "not found")
            if sessionless:
                return await handler(request)
            return await sessions(request, handler)
        except (ApiError, SiteError) as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _render_http_exception(request, exc, True)
        except web.RequestPayloadError:
            # A dashboard form or JSON body not decodable by its Content-Encoding, or cut short.
            return SiteError(400, "invalid request body", headers=unreadable(request)).response()
        except Exception as exc:
            return _render_unexpected(request, exc, True)

    return site_api


async def nosniff(request: web.Request, response: web.StreamResponse) -> None:
    """Every response, JSON and errors included, tells browsers not to guess a type: an API answer that
    echoes input must never be sniffed into HTML or script."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")


async def close_when_told(request: web.Request, response: web.StreamResponse) -> None:
    """An answer carrying `Connection: close` (app/bodies.unreadable: a body cut short, undecodable or too slow)
    closes its connection. aiohttp sends the header but keeps the connection open for a next request, whose
    parser still waits for the rest of the body, until its keep-alive timeout."""
    if response.headers.get("Connection", "").lower() == "close":
        response.force_close()
