"""POST /api/service/event (and its CORS preflight): one site event per request, no key.

Order of checks: body size, JSON, fields, site, origin, verification (production), bots, rate limits;
then the server adds what it derives (session, hashed IP, country/region/city, browser, OS, device,
UTM fields, source, channel), the event goes to the site's actor and the 202 is sent once it is
committed. `ingest` is that whole path; Plausible's /api/event (app/views/plausible.py) runs it too,
with its own payload parser and a site lookup by domain.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
from aiohttp import web
from msgspec import Meta

from actors.base import Overloaded, StoreFailed, StoreUnreachable
from actors.site import SITE_EVENTS, SiteItem
from app import bots, cors, responses
from app.acquisition import acquisition
from app.appkeys import LIMITER, METRICS, POOL, SETTINGS, SITE_RUNTIME, SUPERVISOR, root_app
from app.auth import ingestion
from app.bodies import field_of, read_limited, unreadable
from app.enrich import country_from_headers, ip_hash, visitor_key
from app.input_rules import MAX_DEPTH, decode_json, find_nul, nests_deeper
from app.net import client_ip
from app.responses import SiteError, issue
from app.site_runtime import SiteInfo, SiteRuntime
from app.useragent import Client, device_for, parse_client
from storage import sites as site_store
from storage.clickhouse_schema import ENGAGED_MS, ENGAGEMENT, SCROLL_DEPTH
from storage.events import EventRow
from storage.ids import new_id

log = logging.getLogger("tally.ingest")

BODY_LIMIT = 32 * 1024
DEV_WORKSPACE = "default"
MAX_VIEWPORT = 100_000

MAX_URL = 2048  # characters of a page URL, path or referrer
MAX_ENGAGED_MS = 24 * 3600 * 1000  # an engagement event's time on its page, at most a day
Url = Annotated[str, Meta(max_length=MAX_URL)]


class SiteEventIn(msgspec.Struct):
    s: Annotated[str, Meta(min_length=1, max_length=255)]
    n: Annotated[str, Meta(min_length=1, max_length=64)]
    u: Url | None = None
    p: Url | None = None
    r: Url | None = None
    t: Annotated[str, Meta(max_length=512)] | None = None
    w: int | float | None = None
    props: Any = None
    sid: Annotated[str, Meta(min_length=1, max_length=64)] | None = None
    # The tracker's word on its sid (actors/sessions.py): "join" a page-load id, which may continue the
    # visitor's open visit; "new" an id made by reset(). Absent: the sid is exactly the session id.
    visit: Literal["join", "new"] | None = None
    v: str | None = None
    ts: int | float | None = None
    # An engagement event's (storage.clickhouse_schema.ENGAGEMENT) scroll depth in percent (above 100 stored
    # as 100) and engaged time in ms, as Plausible's tracker sends them: required on one, not stored on others.
    sd: Annotated[int, Meta(ge=0)] | None = None
    e: Annotated[int, Meta(ge=0, le=MAX_ENGAGED_MS)] | None = None


_TEXT_FIELDS = ("s", "n", "u", "p", "r", "t", "sid")


def invalid_payload(issues: list[dict[str, str]]) -> SiteError:
    error = responses.invalid_payload(issues)
    error.rejected = "invalid"  # counted by ingest()
    return error


def _all_issues(data: dict) -> list[dict[str, str]]:
    """Check each field on its own, so that every failing field is reported, not only the first."""
    issues = []
    for f in msgspec.structs.fields(SiteEventIn):
        if f.encode_name not in data:
            if f.required:
                issues.append(issue(f.encode_name, "required"))
            continue
        try:
            msgspec.convert(data[f.encode_name], f.type)
        except msgspec.ValidationError as exc:
            issues.append(issue(f.encode_name, field_of(exc)[1]))
    return issues


def parse_event(body: bytes) -> SiteEventIn:
    data = decode_json_object(body)
    try:
        event = msgspec.convert(data, SiteEventIn)
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        raise invalid_payload(_all_issues(data) or [issue(field, message)]) from None
    event.s = event.s.strip()  # a pasted id with spaces around it, as the analytics reads take siteId
    issues = storable_issues(event, _TEXT_FIELDS) + ([] if event.s else [issue("s", "must not be blank")])
    if issues:
        raise invalid_payload(issues)
    if event.p is None and event.u is not None:
        # Only the page URL: its path and query are the page (as Plausible's `url` gives its pathname).
        event.p = url_path(event.u)
    return event


def url_path(url: str, *, hash_mode: bool = False) -> str | None:
    """Path and query of an absolute page URL (the spec's `p`), with the fragment in hash mode; None for a
    URL that is not absolute."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not (parts.scheme and parts.netloc):
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if hash_mode and parts.fragment:
        path += f"#{parts.fragment}"
    return path[:MAX_URL]


_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def _unescaped(run: re.Match) -> str:
    """A run of %XX escapes as the UTF-8 text it spells; kept as sent when it is not UTF-8, or spells a
    character that would change where the page ends (? #) or a control character."""
    try:
        text = bytes.fromhex(run.group().replace("%", "")).decode()
    except UnicodeDecodeError:
        return run.group()
    return run.group() if any(c in "?#" or ord(c) < 32 or ord(c) == 127 for c in text) else text


def page_path(path: str | None) -> str | None:
    """The page as stored: the path, and a hash route, percent-decoded (`/%C3%BCber` is `/über`, as
    Plausible stores pathnames, so lists show it and filters match it as written); queries are kept as
    sent. Browsers send location.pathname encoded."""
    if path is None or "%" not in path:
        return path
    cut = min((i for i in (path.find("?"), path.find("#")) if i >= 0), default=len(path))
    head, rest = path[:cut], path[cut:]
    hash_at = rest.find("#")
    if hash_at >= 0:  # a hash route (hash mode): decoded up to its own query
        query_at = rest.find("?", hash_at)
        end = query_at if query_at >= 0 else len(rest)
        rest = rest[:hash_at] + _ESCAPES.sub(_unescaped, rest[hash_at:end]) + rest[end:]
    return _ESCAPES.sub(_unescaped, head) + rest


def decode_json_object(body: bytes) -> dict:
    """The body as a JSON object, or the spec's 400s."""
    try:
        data = decode_json(body)
    except msgspec.DecodeError:  # not JSON, or not UTF-8 (app/input_rules.py)
        raise SiteError(400, "invalid json") from None
    except RecursionError:  # deeper than the decoder goes: a payload problem, like on /v1
        raise invalid_payload([issue("props", f"nests deeper than {MAX_DEPTH} levels")]) from None
    except msgspec.ValidationError as exc:  # e.g. a number beyond double range
        field, message = field_of(exc)
        raise invalid_payload([issue(field, message)]) from None
    if not isinstance(data, dict):
        raise invalid_payload([issue("", "expected a JSON object")])
    return data


def storable_issues(event: SiteEventIn, text_fields: dict[str, str] | tuple[str, ...],
                    props_field: str = "props") -> list[dict[str, str]]:
    """What PostgreSQL cannot store (app/input_rules.py), refused here rather than failing the whole
    batch at COPY time, and a blank event name, which names nothing (kept as sent otherwise, as Plausible
    keeps it). text_fields maps each event attribute to the name the sender used (or lists attributes named
    alike). Integers beyond 64 bits are stored, as on /v1."""
    names = text_fields if isinstance(text_fields, dict) else {name: name for name in text_fields}
    issues = [issue(sent, "must not contain NUL characters") for name, sent in names.items()
              if "\x00" in (getattr(event, name) or "")]
    if not event.n.strip():
        issues.append(issue(names.get("n", "n"), "must not be blank"))
    if event.n == ENGAGEMENT:  # the two numbers are all an engagement event says
        issues += [issue(field, "required for an engagement event") for field in ("sd", "e")
                   if getattr(event, field) is None]
    if event.props is not None and nests_deeper(event.props):
        issues.append(issue(props_field, f"nests deeper than {MAX_DEPTH} levels"))
    elif event.props is not None and find_nul(event.props) is not None:
        issues.append(issue(props_field, "must not contain NUL characters"))
    return issues


def _too_large() -> SiteError:
    return SiteError(413, "payload too large", limit=BODY_LIMIT)


async def _read_body(request: web.Request) -> bytes:
    try:
        return await read_limited(request, BODY_LIMIT, _too_large)
    except web.RequestPayloadError:
        # Not decodable by its Content-Encoding, or cut short: no JSON to parse.
        raise SiteError(400, "invalid json", headers=unreadable(request)) from None


async def resolve_site(request: web.Request, runtime: SiteRuntime, site_id: str) -> SiteInfo | None:
    cached, info = runtime.sites.get(site_id)
    if cached and (info is not None or runtime.settings.production):
        return info
    async with root_app(request)[POOL].acquire() as conn:
        row = await site_store.site_by_id(conn, site_id)
        if row is None and not runtime.settings.production:
            row, created = await site_store.create_dev_site(conn, site_id, DEV_WORKSPACE, new_token())
            if created:
                # The spec auto-creates it, but a mistyped or placeholder id would otherwise look like
                # events vanishing: say where they go, once per site (the insert happens once).
                log.warning("unknown site id %r: created it in workspace %r (development only; production "
                            "answers 404). Register your domain with POST /api/sites and use the id it "
                            "returns, or sign in to workspace %r to see these events",
                            site_id, DEV_WORKSPACE, DEV_WORKSPACE)
    return runtime.sites.put_row(site_id, row)


def new_token() -> str:
    return secrets.token_hex(16)


def _rejected(status: int, message: str, reason: str, **extra: object) -> SiteError:
    """A refusal that ingest() counts under `reason` in tally_events_rejected_total."""
    error = SiteError(status, message, **extra)
    error.rejected = reason
    return error


def _check_origin(site: SiteInfo, page: cors.PageOrigin) -> None:
    """Production: the page must be on the site's domain (a sender with no page is a server)."""
    if page.present and not cors.host_matches(page.host, site.domain):
        raise _rejected(403, "origin not allowed", "origin")


async def _registered_origin(request: web.Request, page: cors.PageOrigin) -> bool:
    """Production, before the site is known (a preflight, a body that names none): whether the page's
    host is, or is a subdomain of, some registered site's domain."""
    if not page.host:
        return False
    async with root_app(request)[POOL].acquire() as conn:
        return await site_store.any_domain_registered(conn, cors.candidate_domains(page.host))


async def _within_limits(request: web.Request, site_id: str, ip: str) -> bool:
    app = root_app(request)
    settings, limiter, rejected = app[SETTINGS], app[LIMITER], app[METRICS].events_rejected
    for reason, bucket, per_minute in (("rate_limited_ip", f"site-ip:{ip}", settings.ip_events_per_min),
                                       ("rate_limited_site", f"site:{site_id}", settings.site_events_per_min)):
        if per_minute <= 0:
            continue
        # Only the minute window binds: the second window gets the same allowance.
        verdict = await limiter.hit(bucket, (per_minute, per_minute))
        if not verdict.allowed:
            rejected.labels(reason).inc()
            return False
    return True


def _viewport(w: float | None) -> int | None:
    if w is None or not math.isfinite(w) or not 0 <= w <= MAX_VIEWPORT:
        return None
    return round(w)


def _record(site: SiteInfo, event: SiteEventIn, place: tuple[str | None, str | None, str | None],
            hashed_ip: str, client: Client, received: datetime) -> EventRow:
    # ts is the server's receive time; session_id is the client's sid or None, and the actor stores the
    # visit's id and acquisition instead (actors/sessions.py).
    country, region, city = place
    width = _viewport(event.w)
    utm_source, utm_medium, utm_campaign, utm_term, utm_content, source, channel = acquisition(event.u or event.p,
                                                                                              event.r)
    props = event.props
    if event.n == ENGAGEMENT:
        props = {**(props if isinstance(props, dict) else {}), SCROLL_DEPTH: min(event.sd, 100), ENGAGED_MS: event.e}
    return EventRow(
        new_id("evt"), site.workspace_id, "live", event.n, received, received, site_id=site.id,
        session_id=event.sid, properties=props, url=event.u, path=page_path(event.p), referrer=event.r,
        title=event.t, viewport_w=width, country=country, ip_hash=hashed_ip, browser=client.browser,
        browser_version=client.browser_version, os=client.os, os_version=client.os_version,
        device=device_for(width, client), region=region, city=city, utm_source=utm_source, utm_medium=utm_medium,
        utm_campaign=utm_campaign, utm_term=utm_term, utm_content=utm_content, source=source, channel=channel,
    )


def _place(request: web.Request, runtime: SiteRuntime, ip: str) -> tuple[str | None, str | None, str | None]:
    """(country, region, city): the country from a CDN header, else from TALLY_GEOIP_DB; region and city
    only from a City database."""
    country = country_from_headers(request.headers)
    geoip = runtime.geoip
    if geoip is None:
        return country, None, None
    if geoip.has_cities:
        return geoip.locate(ip, country)
    return (country if country is not None else geoip.country(ip)), None, None


async def _commit(request: web.Request, site_id: str, item: SiteItem) -> None:
    try:
        actor = root_app(request)[SUPERVISOR].actor(("site", site_id))
        # Awaited directly, as on /v1: a shield cost a future and a loop hop per event (~3 µs), and a
        # cancelled request changes nothing either way (the actor commits the event and skips its future).
        await actor.submit(SITE_EVENTS, [item])
    except Overloaded as exc:
        raise _rejected(503, "overloaded", "overloaded", headers={"Retry-After": str(exc.retry_after)}) from None
    except StoreUnreachable as exc:
        raise _rejected(503, "service unavailable", "unavailable",
                        headers={"Retry-After": str(exc.retry_after)}) from None
    except StoreFailed:
        raise _rejected(500, "store failed", "store_failed") from None


SiteResolver = Callable[[web.Request, SiteRuntime, str], Awaitable[SiteInfo | None]]


async def ingest(request: web.Request, parse: Callable[[bytes], SiteEventIn], resolve: SiteResolver,
                 accepted_text: str | None = None) -> web.Response:
    """The whole ingestion path. parse turns the body into an event whose `s` names the site for
    resolve; accepted_text is the body of the 202 (none by default)."""
    runtime = root_app(request)[SITE_RUNTIME]
    production = runtime.settings.production
    page = cors.page_origin(request)
    # Development answers any page; production only pages the site's domain admitted.
    allow = {} if production else cors.mirror(page.origin)
    site = None
    try:
        event = parse(await _read_body(request))
        site = await resolve(request, runtime, event.s)
        if site is None:
            raise _rejected(404, "unknown site", "unknown_site")
        if production:
            _check_origin(site, page)
            # From here on the page may read the answer, "site not verified" included.
            allow = cors.mirror(page.origin)
            if not site.verified:
                raise _rejected(403, "site not verified", "unverified")
        accepted = web.Response(status=202, headers=allow, text=accepted_text)
        user_agent = request.headers.get("User-Agent", "")
        if bots.is_bot(user_agent, from_page=page.present):
            root_app(request)[METRICS].events_rejected.labels("bot").inc()
            return accepted
        ip = client_ip(request, runtime.settings.trusted_proxies)
        if not await _within_limits(request, site.id, ip):
            return accepted
        received = runtime.clock()
        visitor = visitor_key(await runtime.salt.get(received.astimezone(UTC).date()), site.id, ip, user_agent)
        record = _record(site, event, _place(request, runtime, ip), ip_hash(runtime.ip_salt, ip),
                         parse_client(user_agent), received)
        sid_mode = (event.visit or "exact") if event.sid else None
        await _commit(request, site.id, SiteItem(record, visitor, sid_mode))
        return accepted
    except SiteError as exc:
        if exc.rejected:
            root_app(request)[METRICS].events_rejected.labels(exc.rejected).inc()
        if production and site is None and page.origin:
            # Refused before a site was known (body, unknown id): readable by the pages a preflight admits.
            if await _registered_origin(request, page):
                allow = cors.mirror(page.origin)
        exc.headers.update(allow)
        raise


@ingestion
async def post_event(request: web.Request) -> web.Response:
    return await ingest(request, parse_event, resolve_site)


@ingestion
async def preflight(request: web.Request) -> web.Response:
    """CORS preflight. The body (and so the site) is unknown here: production admits an origin whose
    host is, or is a subdomain of, some registered site's domain; the POST then checks the site."""
    page = cors.page_origin(request)
    if page.origin is None:
        return web.Response(status=204, headers={"Allow": cors.ALLOW_METHODS})
    if root_app(request)[SETTINGS].production and not await _registered_origin(request, page):
        raise SiteError(403, "origin not allowed")
    return web.Response(status=204, headers=cors.preflight_headers(page.origin))


def setup(router: web.UrlDispatcher) -> None:
    router.add_post("/service/event", post_event)
    router.add_route("OPTIONS", "/service/event", preflight)
