"""The filter and breakdown vocabulary of site-analytics reads, shared by the HTTP parser (app/) and the
query builders (storage/). Pure data: no SQL here.

A filter is `dimension op value`: `==` is, `!=` is not, `~=` contains (case-insensitive); with more values
(`also`), `==` and `~=` match any of them and `!=` none. For the page
dimensions (`page`, `entry_page`, `exit_page`) a `==`/`!=` value may use `*` (within one path segment)
and `**` (across segments). `props:<key>` names a custom property; `goal` names a goal by its display
name ("Visit /thanks/**" for a page goal, the event name for an event goal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Op = Literal["==", "!=", "~="]

# Dimensions a filter or a breakdown may name (besides `props:<key>`), with the events column each reads.
# `page` is the path; `source` and `channel` are derived at ingestion; entry/exit pages are per visit.
DIMENSIONS: dict[str, str] = {
    "event": "name",
    "page": "path",
    "entry_page": "entry_page",
    "exit_page": "exit_page",
    "referrer": "referrer",
    "source": "source",
    "channel": "channel",
    "utm_source": "utm_source",
    "utm_medium": "utm_medium",
    "utm_campaign": "utm_campaign",
    "utm_term": "utm_term",
    "utm_content": "utm_content",
    "country": "country",
    "region": "region",
    "city": "city",
    "browser": "browser",
    "browser_version": "browser_version",
    "os": "os",
    "os_version": "os_version",
    "device": "device",
    "goal": "goal",
}
PAGE_DIMENSIONS = frozenset({"page", "entry_page", "exit_page"})
# The properties a breakdown takes besides props:<key>, and those of them every event has a value of (what
# has-values checks): a visit defines the entry and exit pages, the site's goals define goal.
BREAKDOWN_PROPERTIES = tuple(d for d in DIMENSIONS if d != "event")
EVENT_PROPERTIES = tuple(d for d in BREAKDOWN_PROPERTIES if d not in ("entry_page", "exit_page", "goal"))
PROPS_PREFIX = "props:"

METRICS = ("visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration", "conversion_rate")
# A breakdown by page also takes these (Plausible's), from the engagement events of Plausible's tracker
# (storage/analytics_engagement.py): null for a page without them.
ENGAGEMENT_METRICS = ("scroll_depth", "time_on_page")

CHANNELS = (
    "Direct", "Organic Search", "Paid Search", "Organic Social", "Paid Social", "Email", "Referral",
    "Affiliates", "Display", "Video", "Other",
)


@dataclass(frozen=True, slots=True)
class Filter:
    dimension: str  # a key of DIMENSIONS, or "props:<key>"
    op: Op
    value: str
    also: tuple[str, ...] = ()  # more values, any of which matches (Plausible's Stats API's `is` of a list)

    @property
    def values(self) -> tuple[str, ...]:
        return (self.value, *self.also)

    @property
    def prop_key(self) -> str | None:
        return self.dimension[len(PROPS_PREFIX):] if self.dimension.startswith(PROPS_PREFIX) else None
