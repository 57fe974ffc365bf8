"""Where a site event's visit came from: UTM fields of the page URL, the source and the channel.

- UTM fields are the page URL's `utm_source`, `utm_medium`, `utm_campaign`, `utm_term`, `utm_content`
  query parameters; `source`, `ref` and `via` (in that order) stand for `utm_source` when it is absent.
- The source is the tagged utm_source (a known source's spelling when it names one: "google" ->
  "Google", "ig" -> "Instagram"), else the referrer's known name ("Google" for google.<tld>) or its host
  without `www.`; None (Direct) without either, or when the referrer is the page's own host.
- The channel follows Google's default channel grouping the way Plausible applies it; CHANNEL_RULES
  lists the rules in the order they are tried (docs/decisions.md has the same table).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import parse_qsl, urlsplit

from app.referrers import CATEGORY, EMAIL, PAID_TAGS, SEARCH, SHOPPING, SOCIAL, VIDEO, name_of_host, name_of_tag

UTM_FIELDS = ("utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content")
SOURCE_ALIASES = ("source", "ref", "via")  # used, in this order, when utm_source is absent
MAX_VALUE = 256  # longer UTM values are cut


class Acquisition(NamedTuple):
    utm_source: str | None
    utm_medium: str | None
    utm_campaign: str | None
    utm_term: str | None
    utm_content: str | None
    source: str | None
    channel: str


def _query(url: str | None) -> dict[str, str]:
    """First non-empty value of each parameter of the URL's query."""
    if not url or "?" not in url:
        return {}
    query = url.split("?", 1)[1].split("#", 1)[0]
    values: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=False):
        # A percent-encoded NUL (%00) decodes to a character PostgreSQL text cannot hold.
        value = value.replace("\x00", "").strip()
        if value and key not in values:
            values[key] = value[:MAX_VALUE]
    return values


def _host(url: str | None) -> str | None:
    """Lower-case host of an http(s) URL without `www.`; None for anything else."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host:
        return None
    host = host.rstrip(".")
    return host[4:] if host.startswith("www.") else host


def referrer_source(referrer: str | None, page_url: str | None) -> str | None:
    """The source named by a referrer: None when absent, internal (same host as the page) or localhost."""
    host = _host(referrer)
    if host is None or host == "localhost" or host == _host(page_url):
        return None
    return name_of_host(host) or host


_PAID_MEDIUM = re.compile(r"^(.*cp.*|ppc|retargeting|paid.*)$")
_SHOP_CAMPAIGN = re.compile(r"^(.*(([^a-df-z]|^)shop|shopping).*)$")
DISPLAY_MEDIA = frozenset({"display", "banner", "expandable", "interstitial", "cpm"})
SOCIAL_MEDIA = frozenset({"social", "social-network", "social-media", "sm", "social network", "social media"})
EMAIL_TAGS = ("email", "e-mail", "e_mail", "e mail", "newsletter")
REFERRAL_MEDIA = frozenset({"referral", "app", "link"})


class _Facts(NamedTuple):
    source: str  # lower-cased, "" when none
    category: str | None  # of the source in app.referrers
    medium: str
    campaign: str
    tag: str  # utm_source, lower-cased
    click_id: str | None  # gclid or msclkid when the URL carries one


def _paid(f: _Facts) -> bool:
    return bool(_PAID_MEDIUM.match(f.medium)) or f.tag in PAID_TAGS


# (channel, rule) in the order they are tried; the first that holds wins, else Direct. Google's channels
# that Tally has no name for (Cross-network, Paid Shopping, Paid Other, Audio, SMS, Mobile Push) are
# Other; Paid and Organic Video are both Video; Organic Shopping counts as Referral.
CHANNEL_RULES: tuple[tuple[str, object], ...] = (
    ("Other", lambda f: "cross-network" in f.campaign),
    ("Other", lambda f: (f.category == SHOPPING or bool(_SHOP_CAMPAIGN.match(f.campaign)))
     and bool(_PAID_MEDIUM.match(f.medium))),
    ("Paid Search", lambda f: (f.category == SEARCH and _paid(f))
     or (f.source == "google" and f.click_id == "gclid") or (f.source == "bing" and f.click_id == "msclkid")),
    ("Paid Social", lambda f: f.category == SOCIAL and _paid(f)),
    ("Video", lambda f: f.category == VIDEO and _paid(f)),
    ("Display", lambda f: f.medium in DISPLAY_MEDIA),
    ("Other", lambda f: bool(_PAID_MEDIUM.match(f.medium))),
    ("Referral", lambda f: f.category == SHOPPING or bool(_SHOP_CAMPAIGN.match(f.campaign))),
    ("Organic Social", lambda f: f.category == SOCIAL or f.medium in SOCIAL_MEDIA),
    ("Video", lambda f: f.category == VIDEO or "video" in f.medium),
    ("Organic Search", lambda f: f.category == SEARCH),
    ("Email", lambda f: f.category == EMAIL or any(t in f.tag or t in f.medium for t in EMAIL_TAGS)),
    ("Affiliates", lambda f: f.medium == "affiliate"),
    ("Other", lambda f: f.medium == "audio" or f.medium == "sms" or f.tag == "sms"),
    ("Other", lambda f: f.medium.endswith("push") or "mobile" in f.medium or "notification" in f.medium),
    ("Referral", lambda f: f.medium in REFERRAL_MEDIA or f.source != ""),
)


def channel_of(source: str | None, utm_medium: str | None, utm_campaign: str | None,
               utm_source: str | None, click_id: str | None = None) -> str:
    if not (source or utm_medium or utm_campaign or utm_source):
        return "Direct"  # every rule below needs one of them
    facts = _Facts((source or "").lower(), CATEGORY.get(source or ""), (utm_medium or "").lower(),
                   (utm_campaign or "").lower(), (utm_source or "").lower(), click_id)
    for channel, rule in CHANNEL_RULES:
        if rule(facts):  # type: ignore[operator]
            return channel
    return "Direct"


@lru_cache(maxsize=4096)
def acquisition(page_url: str | None, referrer: str | None) -> Acquisition:
    """Cached by (page URL, referrer): a site's events repeat few of those pairs (its landing pages and
    the referrers that send to them), and the URL parsing and channel rules cost several microseconds
    an event. A bounded LRU: one-off URLs (click ids) only pass through it."""
    query = _query(page_url)
    utm = [query.get(name) for name in UTM_FIELDS]
    if utm[0] is None:
        utm[0] = next((query[a] for a in SOURCE_ALIASES if a in query), None)
    source = name_of_tag(utm[0]) if utm[0] else referrer_source(referrer, page_url)
    click_id = "gclid" if "gclid" in query else "msclkid" if "msclkid" in query else None
    return Acquisition(*utm, source, channel_of(source, utm[1], utm[2], utm[0], click_id))
