"""Request metrics and error rendering: every failure leaves as JSON in its API's shape."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from app.appkeys import METRICS, OUTAGES
from app.auth import Handler
from app.input_rules import storable_text
from app.outages import unavailable, unreachable
from app.responses import ApiError, SiteError, json_response

log = logging.getLogger("tally.http")

_CODES = {
    400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type",
    429: "rate_limited", 503: "unavailable",
}


def _route_name(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        # Any token is a valid HTTP method: fold the unusual ones so clients cannot mint label values.
        method = request.method if request.method in _METHODS else "OTHER"
        counter, latency = request.config_dict[METRICS].route(method, _route_name(request), status)
        counter.inc()
        latency.observe(time.perf_counter() - started)


def _render_http_exception(request: web.Request, exc: web.HTTPException, site: bool) -> web.Response:
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    message = exc.reason if exc.status != 404 else f"no route for {request.method} {request.path}"
    if site:
        return json_response({"error": message.lower()}, exc.status, headers)
    code = _CODES.get(exc.status, "error")
    return json_response({"error": {"code": code, "message": message}}, exc.status, headers)


def _path_ids_middleware(not_found: Callable[[], Exception]) -> Middleware:
    """An id in the path that PostgreSQL text cannot hold (NUL, a lone surrogate) names nothing: the
    API's 404 before any handler binds it to SQL (app/input_rules.py)."""

    @web.middleware
    async def path_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not all(storable_text(value) for value in request.match_info.values()):
            raise not_found()
        return await handler(request)

    return path_ids


keyed_path_ids = _path_ids_middleware(lambda: ApiError(404, "not_found", "not found"))
site_path_ids = _path_ids_middleware(lambda: SiteError(404, "not found"))


def _error_middleware(site: bool) -> Middleware:
    """Every failure as JSON in one API's shape: the site API's flat {"error": "..."} (site=True, on the
    /api sub-application) or the keyed {"error": {"code", "message"}} (the root and /v1)."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except (ApiError, SiteError) as exc:
            return exc.response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _render_http_exception(request, exc, site)
        except Exception as exc:
            dependency = unreachable(exc)
            if dependency is not None:
                request.config_dict[OUTAGES].down(dependency, exc, "requests that need it answer 503")
                return unavailable(dependency, site)
            log.exception("unhandled error method=%s path=%s", request.method, request.path)
            if site:
                return json_response({"error": "internal error"}, 500)
            return json_response({"error": {"code": "internal_error", "message": "internal server error"}}, 500)

    return errors


error_middleware = _error_middleware(site=False)
site_error_middleware = _error_middleware(site=True)


async def nosniff(request: web.Request, response: web.StreamResponse) -> None:
    """Every response, JSON and errors included, tells browsers not to guess a type: an API answer that
    echoes input must never be sniffed into HTML or script."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
