"""POST /api/event: Plausible's Events API, so a page's Plausible tracker can point at Tally unchanged.

The payload (`name`/`n`, `url`/`u`, `domain`/`d`, `referrer`/`r`, `props`/`p` and its older spelling
`meta`/`m`, `revenue`/`$`, `interactive`/`i`, the tracker's `w` viewport width and `h` hash mode, and an
`engagement` event's `sd` scroll depth and `e` engaged time)
becomes a Tally site event and then goes down the very path of /api/service/event (`ingest.ingest`):
same checks, bot filter, rate limits, sessions, origin rules and verification in production, same
errors. Only two things differ: the site is the one registered for the domain, and the 202 says `ok`
as Plausible's does.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

import msgspec
from aiohttp import web

from app.appkeys import POOL
from app.auth import ingestion
from app.input_rules import decode_json
from app.responses import issue
from app.site_runtime import SiteInfo, SiteRuntime
from app.views import ingest
from app.views.ingest import MAX_ENGAGED_MS, MAX_URL, SiteEventIn, invalid_payload
from app.views.sites import normalize_domain, site_id_for
from storage import sites as site_store

# Plausible's tracker names an outbound click this way; Tally's built-in name for it is `outbound`.
NAME_MAP = {"Outbound Link: Click": "outbound"}
_CURRENCY = re.compile(r"^[A-Z]{3}\Z")

# (long name, short name): Plausible accepts either spelling of each field.
ALIASES = (("name", "n"), ("url", "u"), ("domain", "d"), ("referrer", "r"), ("props", "p"), ("meta", "m"),
            ("revenue", "$"), ("interactive", "i"), ("hashMode", "h"))


def _pick(data: dict, long: str, short: str) -> tuple[str, Any]:
    """(the key the sender used, its value); the long name wins when both are present, and names a
    field that is missing."""
    if data.get(long) is None and data.get(short) is not None:
        return short, data[short]
    return long, data.get(long)


def _text(issues: list, field: str, value: Any, *, required: bool, max_length: int) -> str | None:
    if value is None or value == "":
        if required:
            issues.append(issue(field, "required"))
        return None
    if not isinstance(value, str):
        issues.append(issue(field, "Expected `str`"))
        return None
    if len(value) > max_length:
        issues.append(issue(field, f"Expected `str` of length <= {max_length}"))
        return None
    return value


def _json_text(value: Any) -> Any:
    """Plausible's npm tracker sends objects encoded as JSON strings: the decoded value (None when the
    string is not JSON); anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return decode_json(value)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # deeper than the decoder goes
        return None


def _props(issues: list, field: str, value: Any) -> dict | None:
    """An object, or an object encoded as a JSON string."""
    if value is None:
        return None
    value = _json_text(value)
    if not isinstance(value, dict):
        issues.append(issue(field, "must be an object or a JSON-encoded object"))
        return None
    return value


def _revenue(issues: list, field: str, value: Any) -> dict[str, str] | None:
    """{"currency": ISO 4217 code, "amount": number or numeric string} -> the two props Tally keeps."""
    if value is None:
        return None
    value = _json_text(value)
    currency = value.get("currency") if isinstance(value, dict) else None
    amount = value.get("amount") if isinstance(value, dict) else None
    try:
        number = Decimal(str(amount)) if isinstance(amount, int | float | str) and not isinstance(amount, bool) \
            else None
    except InvalidOperation:
        number = None
    if not isinstance(currency, str) or not _CURRENCY.match(currency.upper()) or number is None \
            or not number.is_finite():
        issues.append(issue(field, "must be {\"currency\": \"<ISO 4217 code>\", \"amount\": <number>}"))
        return None
    return {"$revenue_amount": str(number), "$revenue_currency": currency.upper()}


def _whole(issues: list, field: str, value: Any, most: int | None = None) -> int | None:
    """A whole number from 0 (to `most`), as an engagement event's `sd` and `e`; None when absent."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (most is not None and value > most):
        issues.append(issue(field, "Expected a whole number >= 0" + (f" and <= {most}" if most is not None else "")))
        return None
    return value


def _absolute(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return bool(parts.scheme and parts.netloc)


def parse_plausible(body: bytes) -> SiteEventIn:
    """A Plausible payload as a Tally event whose `s` is the normalized domain."""
    data = ingest.decode_json_object(body)
    issues: list = []
    fields = {long: _pick(data, long, short) for long, short in ALIASES}
    name = _text(issues, *fields["name"], required=True, max_length=64)
    url = _text(issues, *fields["url"], required=True, max_length=MAX_URL)
    if url is not None and not _absolute(url):
        issues.append(issue(fields["url"][0], "must be an absolute URL"))
        url = None
    referrer = _text(issues, *fields["referrer"], required=False, max_length=MAX_URL)
    domain_field, raw_domain = fields["domain"]
    domain = None
    if _text(issues, domain_field, raw_domain, required=True, max_length=1024) is not None:
        # A rollup list ("a.com,b.com") records the event for its first domain.
        domain = normalize_domain(raw_domain.split(",", 1)[0])
        if domain is None:
            issues.append(issue(domain_field, "not a domain name"))
    props = _props(issues, *fields["props"])
    # Custom props under their older name (Plausible's legacy tracker sends `m`); `p` wins a key in both.
    meta = _props(issues, *fields["meta"])
    if meta:
        props = {**meta, **(props or {})}
    revenue = _revenue(issues, *fields["revenue"])
    interactive_field, interactive = fields["interactive"]
    if interactive is not None and not isinstance(interactive, bool):
        issues.append(issue(interactive_field, "Expected `bool`"))
    width = data.get("w")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int | float)):
        issues.append(issue("w", "Expected `number`"))
        width = None
    scroll_depth, engaged_ms = _whole(issues, "sd", data.get("sd")), _whole(issues, "e", data.get("e"), MAX_ENGAGED_MS)
    if issues:
        raise invalid_payload(issues)
    if revenue:
        props = {**(props or {}), **revenue}
    hash_mode = fields["hashMode"][1] in (1, True, "1")
    event = SiteEventIn(s=domain, n=NAME_MAP.get(name, name), u=url, p=ingest.url_path(url, hash_mode=hash_mode),
                        r=referrer, w=width, props=props, sd=scroll_depth, e=engaged_ms)
    problems = ingest.storable_issues(event, {"n": fields["name"][0], "u": fields["url"][0],
                                              "r": fields["referrer"][0]},
                                       fields["props" if fields["props"][1] is not None else "meta"][0])
    if problems:
        raise invalid_payload(problems)
    return event


async def resolve_domain(request: web.Request, runtime: SiteRuntime, domain: str) -> SiteInfo | None:
    """The site registered for the domain: its verified owner, else its oldest claim. The first claim
    has the id derived from the domain, so that one is cached by id like ingestion's; a site with another
    id (a later claim that won verification) is not cached under the derived id, which names another
    site. Outside production an unknown domain registers itself, as an unknown site id does."""
    site_id = site_id_for(domain)
    cached, info = runtime.sites.get(site_id)
    if cached and (info is not None or runtime.settings.production):
        return info
    async with request.config_dict[POOL].acquire() as conn:
        row = await site_store.site_with_domain(conn, domain)
        if row is not None and row["id"] != site_id:
            return runtime.sites.info(row)
        if row is None and not runtime.settings.production:
            row, _ = await site_store.create_dev_site(conn, site_id, ingest.DEV_WORKSPACE, ingest.new_token(),
                                                      domain=domain)
    return runtime.sites.put_row(site_id, row)


@ingestion
async def post_event(request: web.Request) -> web.Response:
    return await ingest.ingest(request, parse_plausible, resolve_domain, accepted_text="ok")


def setup(router: web.UrlDispatcher) -> None:
    router.add_post("/event", post_event)
    router.add_route("OPTIONS", "/event", ingest.preflight)
