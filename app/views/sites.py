"""GET/POST /api/sites and GET/POST /api/verify: site registration and DNS TXT verification.

Site ids are derived from the normalized domain: the first 16 hex characters of
SHA-256("tally-site:" + domain), for the first workspace to claim it. Several workspaces may claim a
domain while nobody has verified it; a later claim gets an id derived from the domain and its workspace
id. Verification decides ownership: the first claim to verify owns the domain, the others can no
longer verify, and new claims answer 409.
"""

from __future__ import annotations

import hashlib
import logging
import re

import aiohttp
import orjson
from aiohttp import web

from app.appkeys import LIMITER, POOL, SETTINGS, SITE_RUNTIME
from app.bodies import decode_site_json, read_site_body, read_site_form
from app.dashboard_session import current_account
from app.input_rules import query_int, storable_text
from app.responses import SiteError, iso_ms, json_response
from app.time_zones import DEFAULT as DEFAULT_ZONE
from app.time_zones import is_time_zone
from app.views import ingest, realtime
from app.views.ingest import new_token
from storage import sites as site_store

log = logging.getLogger("tally.sites")

RECORD_PREFIX = "tally-verify"
# DNS checks (per second, per minute) per signed-in account: each asks the resolver, and records take
# minutes to appear, so a person re-checking has room while a loop cannot turn the service into its resolver.
VERIFY_LIMITS = (2, 10)
BODY_LIMIT = 4096  # a domain, as JSON or a form
MAX_SITES = 50
TOTAL_HEADER = "X-Total-Count"
DOH_TIMEOUT = aiohttp.ClientTimeout(total=5)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)\Z")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
# What may precede a host's '@' (RFC 3986 userinfo, lower-cased): with anything else, such as a backslash,
# which a browser reads as a slash ('a.com\@evil.com' is a.com's page), the host is not the text after '@'.
_USER_INFO = re.compile(r"[a-z0-9._~!$&'()*+,;=:%-]*\Z")


def normalize_domain(raw: str) -> str | None:
    """'HTTPS://www.Example.com:8080/path?q' -> 'example.com'; None when it is not a domain name."""
    value = raw.strip().lower()
    value = _SCHEME.sub("", value)
    value = re.split(r"[/?#]", value, maxsplit=1)[0]
    user_info, at, value = value.rpartition("@")  # user:pass@
    if at and not _USER_INFO.match(user_info):
        return None
    value = value.split(":", 1)[0].rstrip(".")
    if value.startswith("www.") and "." in value[4:]:  # www.com is a domain, not com's www. prefix
        value = value[4:]
    try:
        value = value.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    labels = value.split(".")
    if len(labels) < 2 or len(value) > 253 or not all(_LABEL.match(label) for label in labels):
        return None
    if labels[-1].isdigit():  # an IPv4 address, not a domain
        return None
    return value


def site_id_for(domain: str, workspace_id: int | None = None) -> str:
    """The domain's id; with a workspace id, the id of a later claim by that workspace."""
    seed = "tally-site:" + domain + ("" if workspace_id is None else f":{workspace_id}")
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def record_for(token: str) -> str:
    return f"{RECORD_PREFIX}={token}"


def site_json(row) -> dict:
    verified = row["verified_at"] is not None
    return {
        "id": row["id"], "domain": row["domain"], "status": "verified" if verified else "pending",
        "verified": verified, "verifiedAt": iso_ms(row["verified_at"]), "createdAt": iso_ms(row["created_at"]),
        "timezone": row["time_zone"],
    }


async def list_sites(request: web.Request) -> web.Response:
    """The spec's list: at most 50 sites, newest first. Beyond the spec, so that a workspace with more can
    reach them all: `offset` skips that many (the next 50), and X-Total-Count says how many there are."""
    account = await current_account(request)
    try:  # past any workspace's sites, an offset only has to stay a PostgreSQL bigint
        offset = query_int(request.query.get("offset"), 0, 0, 2**62, clamp=True)
    except ValueError:
        raise SiteError(400, "invalid offset") from None
    async with request.config_dict[POOL].acquire() as conn:
        rows = await site_store.list_sites(conn, account.workspace_id, MAX_SITES, offset)
        total = await site_store.count_sites(conn, account.workspace_id)
    return json_response([site_json(r) for r in rows], headers={TOTAL_HEADER: str(total)})


async def _site_fields(request: web.Request) -> tuple[str, str]:
    """The domain and the time zone (optional, UTC by default) of a new site, from JSON or a form."""
    if request.content_type == "application/json":
        data = decode_site_json(await read_site_body(request, BODY_LIMIT))
        fields = data if isinstance(data, dict) else {}
    else:
        fields = await read_site_form(request, BODY_LIMIT)
    value = fields.get("domain")
    if not isinstance(value, str):
        raise SiteError(400, "invalid domain")
    zone = fields.get("timezone")
    zone = DEFAULT_ZONE if zone in (None, "") else zone  # not given, or a form's empty choice
    if not is_time_zone(zone):
        raise SiteError(400, "invalid timezone", detail="an IANA time zone name, such as Europe/Berlin or UTC")
    return value, zone


async def create_site(request: web.Request) -> web.Response:
    """A new site of the caller's workspace; asked again for a domain it has, the same site, unchanged (its
    time zone is changed with PATCH)."""
    account = await current_account(request)
    raw_domain, zone = await _site_fields(request)
    domain = normalize_domain(raw_domain)
    if domain is None:
        raise SiteError(400, "invalid domain")
    workspace_id = account.workspace_id
    async with request.config_dict[POOL].acquire() as conn:
        row = await site_store.site_by_domain(conn, workspace_id, domain)  # asked again: same answer
        if row is None:
            if await site_store.verified_elsewhere(conn, domain, workspace_id):
                raise SiteError(409, "domain already registered")
            token = new_token()
            row = await site_store.create_site(conn, site_id_for(domain), workspace_id, domain, token, zone)
            if row is None:  # the domain's own id is another workspace's claim (or a development auto-site)
                row = await site_store.create_site(conn, site_id_for(domain, workspace_id), workspace_id,
                                                   domain, token, zone)
            if row is None:  # a concurrent request of this workspace created it
                row = await site_store.site_by_domain(conn, workspace_id, domain)
    if row is None:
        raise SiteError(409, "domain already registered")
    request.config_dict[SITE_RUNTIME].sites.forget(row["id"])
    return json_response({"id": row["id"], "domain": row["domain"], "timezone": row["time_zone"]})


async def update_site(request: web.Request) -> web.Response:
    """PATCH /api/sites/{site_id} with JSON {"timezone"}: the site's settings, answered with the site."""
    row = await path_site(request)
    data = decode_site_json(await read_site_body(request, BODY_LIMIT))
    if not isinstance(data, dict):
        raise SiteError(400, "invalid payload", issues=[{"field": "", "message": "expected a JSON object"}])
    issues = [{"field": key, "message": "unknown field"} for key in data if key != "timezone"]
    if "timezone" not in data:
        issues.append({"field": "timezone", "message": "required"})
    elif not is_time_zone(data["timezone"]):
        issues.append({"field": "timezone", "message": "must be an IANA time zone name, such as Europe/Berlin"})
    if issues:
        raise SiteError(400, "invalid payload", issues=issues)
    async with request.config_dict[POOL].acquire() as conn:
        row = await site_store.set_time_zone(conn, row["id"], row["workspace_id"], data["timezone"])
    if row is None:  # deleted meanwhile
        raise SiteError(404, "not found")
    return json_response(site_json(row))


async def path_site(request: web.Request):
    """The {site_id} path's site when it is in the caller's workspace; the same 404 for an unknown site (the
    routes under /api/sites/{site_id}/: goals, shared links)."""
    account = await current_account(request)
    site_id = request.match_info["site_id"]
    row = None
    if storable_text(site_id):
        async with request.config_dict[POOL].acquire() as conn:
            row = await site_store.site_by_id(conn, site_id)
    if row is None or row["workspace_id"] != account.workspace_id:
        raise SiteError(404, "not found")
    return row


async def _own_site(request: web.Request):
    """The ?site= row when it is in the caller's workspace; None when no such site exists."""
    account = await current_account(request)
    site_id = request.query.get("site", "").strip()  # as siteId is taken by the analytics reads
    if not site_id:
        raise SiteError(400, "missing site")
    if not storable_text(site_id):
        return None
    async with request.config_dict[POOL].acquire() as conn:
        row = await site_store.site_by_id(conn, site_id)
    if row is not None and row["workspace_id"] != account.workspace_id:
        raise SiteError(404, "not found")
    return row


def _status(row) -> dict:
    if row["verified_at"] is not None:
        return {"status": "verified", "domain": row["domain"]}
    return {"status": "pending", "record": record_for(row["verification_token"]), "domain": row["domain"]}


async def get_verify(request: web.Request) -> web.Response:
    row = await _own_site(request)
    if row is None:
        return json_response({"status": "not_found"})
    return json_response(_status(row))


async def post_verify(request: web.Request) -> web.Response:
    row = await _own_site(request)
    if row is None:
        return json_response({"status": "not_found"})
    if row["verified_at"] is not None:
        return json_response(_status(row))
    pool, doh_url = request.config_dict[POOL], request.config_dict[SETTINGS].doh_url
    async with pool.acquire() as conn:
        if await site_store.verified_elsewhere(conn, row["domain"], row["workspace_id"]):
            raise SiteError(409, "domain verified by another workspace")
    account = await current_account(request)
    verdict = await request.config_dict[LIMITER].hit(f"verify:{account.id}", VERIFY_LIMITS)
    if not verdict.allowed:
        raise SiteError(429, "too many verification attempts", headers={"Retry-After": str(verdict.retry_after)})
    try:
        records = await txt_records(doh_url, row["domain"])
    except (ResolverUnreachable, LookupFailed) as exc:
        # Not "pending": the record may well be there; say what failed and where, so it can be fixed.
        message = (f"could not reach the DNS-over-HTTPS resolver at {doh_url}" if isinstance(exc, ResolverUnreachable)
                   else f"the DNS-over-HTTPS resolver at {doh_url} could not look up {row['domain']}")
        error = SiteError(502, message, resolver=doh_url, reason=str(exc))
        error.extra.update(_status(row))  # what to publish, as a pending answer would say
        raise error from None
    if record_for(row["verification_token"]) in records:
        async with pool.acquire() as conn:
            won = await site_store.mark_verified(conn, row["id"])
        if not won:
            raise SiteError(409, "domain verified by another workspace")
        request.config_dict[SITE_RUNTIME].sites.forget(row["id"])
        return json_response({"status": "verified", "domain": row["domain"]})
    return json_response(_status(row))


class ResolverUnreachable(Exception):
    """The DNS-over-HTTPS resolver gave no usable answer (unreachable, an HTTP error, not JSON)."""


class LookupFailed(Exception):
    """The resolver answered, with a DNS error other than "no such name" (SERVFAIL, REFUSED, ...): whether
    the record exists is unknown."""


# DNS response codes (RFC 1035, 6895) a DoH JSON answer carries as Status; 0 and 3 are answers.
_RCODES = {1: "FORMERR", 2: "SERVFAIL", 4: "NOTIMP", 5: "REFUSED"}
_ANSWERED = (0, 3)  # NOERROR, NXDOMAIN (no such name: no record)


_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _txt_value(data: str) -> str:
    """DoH JSON gives TXT data as one or more quoted strings ('"a" "b"'): join them, as DNS does."""
    parts = _QUOTED.findall(data)
    if not parts:
        return data.strip()
    return "".join(re.sub(r"\\(.)", r"\1", p) for p in parts)


def published_value(text: str) -> str:
    """A TXT value as the user meant it: without the whitespace a copy takes along, or one pair of quotes
    typed into a DNS panel that adds its own (the token must still match exactly)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    return text


async def txt_records(doh_url: str, domain: str) -> set[str]:
    """TXT records at the domain apex through a DNS-over-HTTPS JSON resolver, each as the user meant it
    (published_value); ResolverUnreachable when the resolver gives no usable answer, LookupFailed when it
    could not look the name up."""
    try:
        async with aiohttp.ClientSession(timeout=DOH_TIMEOUT) as http, http.get(
            doh_url, params={"name": domain, "type": "TXT"}, headers={"Accept": "application/dns-json"}
        ) as resp:
            if resp.status != 200:
                log.warning("DoH lookup failed domain=%s status=%s", domain, resp.status)
                raise ResolverUnreachable(f"the resolver answered HTTP {resp.status}")
            answer = orjson.loads(await resp.read())
    except TimeoutError:
        log.warning("DoH lookup timed out domain=%s", domain)
        raise ResolverUnreachable(f"no answer within {DOH_TIMEOUT.total:g} seconds") from None
    except (aiohttp.ClientError, OSError) as exc:  # after TimeoutError, an OSError
        log.warning("DoH lookup failed domain=%s error=%r", domain, exc)
        raise ResolverUnreachable(f"connection failed ({type(exc).__name__})") from None
    except orjson.JSONDecodeError:
        log.warning("DoH lookup failed domain=%s error=not JSON", domain)
        raise ResolverUnreachable("the answer was not DNS JSON") from None
    answer = answer if isinstance(answer, dict) else {}
    status = answer.get("Status", 0)
    if status not in _ANSWERED:
        log.warning("DoH lookup failed domain=%s status=%r", domain, status)
        name = _RCODES.get(status, "an error") if isinstance(status, int) else "an error"
        raise LookupFailed(f"the resolver answered {name} (DNS status {status})")
    return {published_value(_txt_value(r["data"])) for r in answer.get("Answer") or []
            if isinstance(r, dict) and r.get("type") == 16 and isinstance(r.get("data"), str)}


def setup_site_api(router: web.UrlDispatcher) -> None:
    """Ingestion, realtime, sites and verification routes."""
    ingest.setup(router)
    realtime.setup(router)
    router.add_get("/sites", list_sites)
    router.add_post("/sites", create_site)
    router.add_patch("/sites/{site_id}", update_site)
    router.add_get("/verify", get_verify)
    router.add_post("/verify", post_verify)
