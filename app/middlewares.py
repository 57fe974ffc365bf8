"""Request metrics and error rendering: every failure leaves as JSON in its API's shape."""

from __future__ import annotations

import logging
import time

from aiohttp import web

from app import metrics
from app.auth import Handler
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
_children: dict[tuple[str, str, int], tuple] = {}


def _route_metrics(method: str, route: str, status: int) -> tuple:
    """(request counter, latency histogram) for these labels, resolved once per combination."""
    key = (method, route, status)
    found = _children.get(key)
    if found is None:
        found = _children[key] = (metrics.REQUESTS.labels(method, route, str(status)),
                                  metrics.REQUEST_SECONDS.labels(route))
    return found


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
        counter, latency = _route_metrics(method, _route_name(request), status)
        counter.inc()
        latency.observe(time.perf_counter() - started)


def _is_site_api(request: web.Request) -> bool:
    return request.path.startswith("/api/")


def _render_http_exception(request: web.Request, exc: web.HTTPException) -> web.Response:
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    message = exc.reason if exc.status != 404 else f"no route for {request.method} {request.path}"
    if _is_site_api(request):
        return json_response({"error": message.lower()}, exc.status, headers)
    code = _CODES.get(exc.status, "error")
    return json_response({"error": {"code": code, "message": message}}, exc.status, headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except (ApiError, SiteError) as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _render_http_exception(request, exc)
    except Exception:
        log.exception("unhandled error method=%s path=%s", request.method, request.path)
        if _is_site_api(request):
            return json_response({"error": "internal error"}, 500)
        return json_response({"error": {"code": "internal_error", "message": "internal server error"}}, 500)


async def nosniff(request: web.Request, response: web.StreamResponse) -> None:
    """Every response, JSON and errors included, tells browsers not to guess a type: an API answer that
    echoes input must never be sniffed into HTML or script."""
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
