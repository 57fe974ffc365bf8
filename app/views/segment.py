"""The Segment HTTP Tracking API: POST /v1/track, /identify, /page, /screen, /group, /alias, /batch and the
analytics.js short forms /v1/t, /i, /p, /s, /g, /a and /b (its batching mode), with CORS for analytics.js.

These calls carry a Segment write key (HTTP Basic user name, or `writeKey` in the body), not a Tally key,
so they bypass the keyed middleware (app.auth) and authenticate, rate-limit and answer here, in Segment's
shapes: `{"success": true}`, or `{"code", "message"}` with a 4xx/5xx. POST /v1/identify serves both APIs:
with `Authorization: Bearer <Tally key>` it is Tally's identify, with anything else it is Segment's.
Messages go through the workspace actor like /v1/events, so a 2xx means they are committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec
from aiohttp import web

from actors.workspace import SEGMENT
from app.appkeys import LIMITER, METRICS, SETTINGS
from app.auth import auth_scheme, requires
from app.bodies import read_body
from app.cors import ALLOW_METHODS, MAX_AGE
from app.input_rules import decode_json
from app.net import base_url, client_ip
from app.plans import ANONYMOUS, limits_for
from app.responses import ApiError, json_response
from app.segment.messages import (
    BATCH_LIMIT,
    CALL_LIMIT,
    SHORT_PATHS,
    TYPES,
    Batch,
    Invalid,
    decode_message,
    field_message,
    to_op,
)
from app.segment.writekeys import WRITE_KEYS, SegmentSource, from_basic_auth
from app.views import users
from app.views.events import commit

# The rate-limit group Segment calls count against, per source (they carry no Tally key).
GROUP = "events"
# The batch call's other paths: analytics.js's batching mode posts to /v1/b, analytics-ruby to /v1/import
# and analytics-java to /v1/import/ (Segment's import endpoint, the batch call under its older name).
BATCH_PATHS = ("/b", "/import", "/import/")

# analytics.js posts from the customer's pages to another origin, with its write key in an Authorization
# header (and X-Retry-Count on retries), so every call is preflighted. A write key is public in those pages
# anyway: any origin may call, as on Segment's own API. No Allow-Credentials: these routes read no cookie.
CORS_ALLOW_HEADERS = "Authorization, Content-Type, X-Retry-Count"


class SegmentError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


async def _read(request: web.Request, limit: int) -> bytes:
    """Segment answers an oversized call with a 400 in its own shape, not the keyed API's 413; the
    other failures of reading (a body not in its Content-Encoding, 400; an unknown coding, 415) are
    put in Segment's shape too."""
    try:
        return await read_body(request, limit, SegmentError(
            400, "payload_too_large", f"the request body exceeds Segment's {limit // 1024} KB limit"))
    except ApiError as exc:
        raise SegmentError(exc.status, exc.code, exc.message, exc.headers) from None


async def _authenticate(request: web.Request, body_key: str | None) -> tuple[SegmentSource, dict[str, str]]:
    """The source of the write key, after its rate limit; returns the X-RateLimit-* headers to send."""
    raw = from_basic_auth(request.headers.get("Authorization", "")) or body_key
    source = await request.config_dict[WRITE_KEYS].lookup(raw) if raw else None
    if source is None:
        bucket, limits = f"ip:{client_ip(request, request.config_dict[SETTINGS].trusted_proxies)}", ANONYMOUS
    else:
        bucket, limits = f"src:{source.id}:{GROUP}", limits_for(source.plan, GROUP, source.custom_limits)
    verdict = await request.config_dict[LIMITER].hit(bucket, limits)
    headers = verdict.headers()
    if not verdict.allowed:
        request.config_dict[METRICS].events_rejected.labels("rate_limited").inc()
        raise SegmentError(429, "rate_limited", "rate limit exceeded; retry after the Retry-After seconds", headers)
    if source is None:
        message = ("invalid write key" if raw else
                   "missing write key: send it as the HTTP Basic user name or as writeKey in the body"
                   + (" (Tally's own identify takes Authorization: Bearer <API key>)" if request.path == "/v1/identify"
                      else ""))
        raise SegmentError(401, "unauthorized", message, headers)
    if source.status == "paused":
        raise SegmentError(403, "source_paused", "this Segment source is paused; resume it to accept calls", headers)
    return source, headers


async def _store(request: web.Request, source: SegmentSource, ops: list, headers: dict[str, str]) -> None:
    try:
        await commit(request, source, SEGMENT, ops)  # type: ignore[arg-type]  # needs workspace_id and env only
    except ApiError as exc:  # 503 overloaded (Retry-After) or 500: the SDKs retry both
        raise SegmentError(exc.status, exc.code, exc.message, {**headers, **exc.headers}) from None


async def _single(request: web.Request, kind: str) -> web.Response:
    body = await _read(request, CALL_LIMIT)
    try:
        msg = decode_message(body)
    except Invalid as exc:
        raise SegmentError(400, "invalid_request", str(exc)) from None
    source, headers = await _authenticate(request, msg.writeKey)
    received = datetime.now(UTC)
    try:
        op = to_op(msg, kind, (source.id, source.workspace_id, source.env), None, received)
    except Invalid as exc:
        request.config_dict[METRICS].events_rejected.labels("invalid").inc()
        raise SegmentError(400, "invalid_request", str(exc), headers) from None
    await _store(request, source, [op], headers)
    return json_response({"success": True}, headers=headers)


async def _batch(request: web.Request) -> web.Response:
    body = await _read(request, BATCH_LIMIT)
    try:
        envelope = decode_json(body, type=Batch)
    except msgspec.ValidationError as exc:
        raise SegmentError(400, "invalid_request", field_message(exc)) from None
    except (msgspec.DecodeError, RecursionError):
        raise SegmentError(400, "invalid_request", "the request body is not valid JSON") from None
    source, headers = await _authenticate(request, envelope.writeKey)
    received = datetime.now(UTC)
    where = (source.id, source.workspace_id, source.env)
    ops, errors = [], []
    for index, raw in enumerate(envelope.batch):
        item = bytes(raw)
        if len(item) > CALL_LIMIT:
            raise SegmentError(400, "payload_too_large",
                               f"batch[{index}] exceeds Segment's {CALL_LIMIT // 1024} KB limit per message", headers)
        try:
            msg = decode_message(item)
            if msg.type not in TYPES:
                raise Invalid(f"type: must be one of {', '.join(TYPES)}")
            ops.append(to_op(msg, msg.type, where, envelope.sent_at, received))
        except Invalid as exc:
            errors.append({"index": index, "code": "invalid_request", "message": str(exc)})
    if errors:
        request.config_dict[METRICS].events_rejected.labels("invalid").inc(len(errors))
    if ops:
        await _store(request, source, ops, headers)
    answer: dict = {"success": True, "received": len(ops), "failed": len(errors)}
    if errors:
        answer["errors"] = errors
    return json_response(answer, headers=headers)


def _cors(request: web.Request) -> dict[str, str]:
    """The page's Origin mirrored, on every answer (errors too: the SDK drops a 400 it can read, and would
    retry what the browser hides from it as a network error). Retry-After is exposed: analytics.js waits as a
    429 says, and a browser hides every header but a few from a cross-origin page. X-RateLimit-Reset is not:
    Tally's is a time, and older analytics.js versions read Segment's as seconds to wait."""
    origin = request.headers.get("Origin")
    return {"Access-Control-Allow-Origin": origin, "Access-Control-Expose-Headers": "Retry-After",
            "Vary": "Origin"} if origin else {}


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS on a Segment path: any origin, POST, the headers analytics.js sends (and any header the
    page's own `headers` setting adds, mirrored from the request)."""
    asked = request.headers.get("Access-Control-Request-Headers", "").strip()
    return web.Response(status=204, headers={
        **_cors(request), "Access-Control-Allow-Methods": ALLOW_METHODS,
        "Access-Control-Allow-Headers": f"{CORS_ALLOW_HEADERS}, {asked}" if asked else CORS_ALLOW_HEADERS,
        "Access-Control-Max-Age": MAX_AGE})


preflight.tally_segment = "always"  # type: ignore[attr-defined]  # no key: app.auth leaves it to us


def _segment_answers(call: Callable[[web.Request], Awaitable[web.Response]]):
    """A Segment route's handler: `call`'s answer, or its SegmentError in Segment's shape (an error before
    the write key was known counts against the client IP's allowance), with the page's CORS either way."""
    async def handler(request: web.Request) -> web.Response:
        try:
            response = await call(request)
        except SegmentError as exc:
            headers = exc.headers
            if "X-RateLimit-Limit" not in headers:
                ip = client_ip(request, request.config_dict[SETTINGS].trusted_proxies)
                headers = {**headers, **(await request.config_dict[LIMITER].hit(f"ip:{ip}", ANONYMOUS)).headers()}
            response = json_response({"code": exc.code, "message": exc.message}, exc.status, headers)
        response.headers.update(_cors(request))
        return response

    handler.tally_segment = "always"  # type: ignore[attr-defined]  # app.auth leaves these to us
    handler.__name__ = call.__name__
    return handler


def _segment_route(kind: str):
    async def call(request: web.Request) -> web.Response:
        return await (_batch(request) if kind == "batch" else _single(request, kind))

    call.__name__ = f"segment_{kind}"
    return _segment_answers(call)


_segment_identify = _segment_route("identify")


@_segment_answers
async def project_settings(request: web.Request) -> web.Response:
    """GET /v1/projects/{write_key}/settings: what analytics.js loads from its CDN before it sends anything,
    served here so that a page needs only `cdnURL` pointed at Tally. It names this service (as the browser
    addressed it) as the one destination, so calls come back to the Segment routes, and turns off the
    SDK's telemetry to Segment. Authenticated and rate-limited like a call: an unknown key is a 401, a paused
    source a 403 (analytics.js then sends nothing)."""
    _, headers = await _authenticate(request, request.match_info["write_key"])
    scheme, _, host = base_url(request).partition("://")
    return json_response({
        "integrations": {"Segment.io": {"apiKey": request.match_info["write_key"], "apiHost": f"{host}/v1",
                                        "protocol": scheme}},
        # analytics.js otherwise sends its own usage counters to Segment's API (api.segment.io/v1/m).
        "metrics": {"sampleRate": 0}, "plan": {}, "remotePlugins": [],
    }, headers={**headers, "Cache-Control": "public, max-age=300"})


@requires("write", "identify")
async def identify(request: web.Request) -> web.StreamResponse:
    """POST /v1/identify: Tally's identify with a Bearer key, Segment's with anything else."""
    if auth_scheme(request) == "bearer":
        return await users.identify(request)
    return await _segment_identify(request)


identify.tally_segment = "unless_bearer"  # type: ignore[attr-defined]


def setup_segment_routes(router: web.UrlDispatcher) -> None:
    """Every Segment path but /v1/identify's POST, which app.routes maps to identify() above."""
    for kind in (*TYPES, "batch"):
        if kind != "identify":
            router.add_post(f"/{kind}", _segment_route(kind))
    for short, kind in SHORT_PATHS.items():
        router.add_post(f"/{short}", _segment_route(kind))
    for path in BATCH_PATHS:
        router.add_post(path, _segment_route("batch"))
    for path in (*(f"/{kind}" for kind in (*TYPES, "batch")), *(f"/{s}" for s in SHORT_PATHS), *BATCH_PATHS):
        router.add_route("OPTIONS", path, preflight)
    router.add_get("/projects/{write_key}/settings", project_settings)
