"""Site analytics reads: overview, time series, top lists, event log and export."""

from __future__ import annotations

from app.openapi.common import SESSION, SHARE_AUTH, json_body, query, ref, site_errors
from app.views.analytics_params import CUSTOM, PERIODS, RANGES
from storage.site_filters import BREAKDOWN_PROPERTIES, ENGAGEMENT_METRICS, EVENT_PROPERTIES, METRICS

_SITE = query("siteId", {"type": "string", "minLength": 1}, True, "site to query (must be in your workspace)")
_RANGE = query("range", {"type": "string", "enum": [*RANGES, *PERIODS, CUSTOM], "default": "7d"},
               description="the N most recent buckets of the site's time zone: 60 minutes, 24 hours, 168 hours, "
                           "30 days or 90 days; its today, yesterday, this month so far, last month, this year so "
                           "far, this month and the 11 before it (12mo), or all time (since its first event, or "
                           "since it was made); or custom: its days from `from` to `to`")
_DAY = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "format": "date"}
_DAYS = [query("from", _DAY, description="with range=custom (required there): its first day, YYYY-MM-DD"),
         query("to", _DAY, description="with range=custom (required there): its last day, included")]
_EVENT = query("eventName", {"type": "string"}, description="exact event name")
_ERRORS = site_errors(400, 401, 404, 500, 503)  # 503: PostgreSQL away, or the store behind its mirror
_FILTER = {"name": "filter", "in": "query", "required": False, "style": "form", "explode": True,
           "description": "repeatable, ANDed: dimension==value (is), != (is not), ~= (contains); page values "
                          "with == may use * (one segment) and ** (any)",
           "schema": {"type": "array", "items": {"type": "string"}}}

# The overview's filters, which also narrow the event log and the export.
_NARROWING = [
    query("path", {"type": "string"},
          description="case-insensitive substring of the page (path without query or fragment)"),
    query("referrer", {"type": "string"}, description="case-insensitive substring"),
    query("country", {"type": "string"}, description="exact two-letter code"),
    _FILTER,
]
_OFFSET = query("offset", {"type": "integer", "minimum": 0, "default": 0})


def _limit(default: int, maximum: int) -> dict:
    return query("limit", {"type": "integer", "minimum": 1, "default": default},
                 description=f"values above {maximum} are clamped to {maximum}")


def _get(summary: str, params: list, response: dict, shared: bool = True) -> dict:
    """A read; `shared`: a shared link's token may make it too."""
    return {"get": {"summary": summary, "tags": ["site analytics"], "security": SESSION,
                    "parameters": [_SITE, _RANGE, *_DAYS, *params, *([SHARE_AUTH] if shared else [])],
                    "responses": {"200": response, **_ERRORS, **(site_errors(429) if shared else {})}}}


_TOP = {"type": "object", "required": ["data", "total"],
        "properties": {"data": {"type": "array", "items": ref("TopRow")}, "total": {"type": "integer"}}}


def _top(summary: str) -> dict:
    return _get(summary, [_limit(20, 100), _OFFSET,
                          query("eventName", {"type": "string", "default": "pageview"})],
                json_body(_TOP))


# What the two handlers accept, so that a generated client (or schemathesis) sends nothing they refuse: a
# property or props:<key>; a comma list of event properties (empty items are skipped).
_BREAKDOWN_PROPERTY = {"type": "string", "anyOf": [{"enum": list(BREAKDOWN_PROPERTIES)}, {"pattern": "^props:.+$"}]}
_ONE_OF = f"(?:{'|'.join(EVENT_PROPERTIES)})"
_EVENT_PROPERTY_LIST = {"type": "string", "pattern": f"^,*{_ONE_OF}(?:,+{_ONE_OF})*,*$"}

PATHS = {
    "/api/analytics/overview": _get(
        "Totals, visitors, bounce rate, session duration, top lists and a time series",
        [_EVENT, *_NARROWING],
        json_body(ref("Overview")),
    ),
    "/api/analytics/timeseries": _get(
        "Counts of pageviews (or eventName) per bucket of the site's time zone, zero buckets included",
        [query("interval", {"type": "string", "enum": ["minute", "hour", "day"]},
               description="default: minute for 1h, hour for 24h and 7d, day for 30d and 90d"),
         query("eventName", {"type": "string", "default": "pageview"})],
        json_body({"type": "object", "required": ["data"],
                   "properties": {"data": {"type": "array", "items": ref("Point")}, "timezone": ref("TimeZone")}}),
    ),
    "/api/analytics/breakdown": _get(
        "Visitors, visits, pageviews, events, bounce rate, visit duration or conversion rate per value of a property "
        "(and for pages, scroll depth and time on page)",
        [query("property", _BREAKDOWN_PROPERTY, True, f"{', '.join(BREAKDOWN_PROPERTIES)} or props:<key>"),
         query("metrics", {"type": "string", "default": "visitors"},
               description=f"comma list of {', '.join(METRICS)}; with property=page also "
                           f"{' and '.join(ENGAGEMENT_METRICS)} (percent, seconds; null for a page without "
                           "engagement events, or under an event or goal filter)"),
         _limit(20, 1000), _OFFSET, _FILTER],
        json_body({"type": "object", "required": ["data", "property", "metrics"], "properties": {
            "data": {"type": "array", "items": {"type": "object"}}, "property": {"type": "string"},
            "metrics": {"type": "array", "items": {"type": "string"}}, "limit": {"type": "integer"},
            "offset": {"type": "integer"}}}),
    ),
    "/api/analytics/has-values": _get(
        "Whether a breakdown by each property would have rows in the range, without computing it",
        [query("properties", _EVENT_PROPERTY_LIST, True, f"comma list of {', '.join(EVENT_PROPERTIES)}"),
         _FILTER],
        json_body({"type": "object", "required": ["data"], "properties": {
            "data": {"type": "object", "additionalProperties": {"type": "boolean"}}}}),
    ),
    "/api/analytics/property-keys": _get(
        "Custom property keys of the matching events, most used first (what props:<key> breakdowns can name)",
        [_limit(20, 100), _OFFSET, _FILTER],
        json_body({"type": "object", "required": ["data", "limit"], "properties": {
            "data": {"type": "array", "items": {"type": "object", "required": ["key", "events"], "properties": {
                "key": {"type": "string"}, "events": {"type": "integer"}}}},
            "limit": {"type": "integer"}}}),
    ),
    "/api/analytics/top-pages": _top("Top paths (without query string)"),
    "/api/analytics/top-referrers": _top("Top referrer hosts (internal navigation excluded)"),
    "/api/analytics/top-countries": _top("Top countries"),
    "/api/analytics/events": _get(
        "Stored events, newest first, under the overview's filters",
        [_EVENT, *_NARROWING, _limit(50, 500),
         query("offset", {"type": "integer", "minimum": 0, "maximum": 100_000, "default": 0},
               description="past 100,000: 400 offset too large (narrow the range or filters, or export)")],
        json_body({"type": "object", "required": ["events", "total", "limit", "offset"], "properties": {
            "events": {"type": "array", "items": ref("StoredEvent")}, "total": {"type": "integer"},
            "limit": {"type": "integer"}, "offset": {"type": "integer"}}}),
        shared=False,
    ),
    "/api/analytics/export": _get(
        "Streamed file of stored events, newest first (attachment tally-<siteId>-<range>.<format>); "
        "429 past TALLY_EXPORTS_PER_ACCOUNT exports at once; HEAD answers GET's status and headers without "
        "reading events",
        [query("format", {"type": "string", "enum": ["csv", "json"], "default": "csv"}), _limit(10_000, 50_000),
         _EVENT, *_NARROWING],
        {"description": "CSV with a header row (id, createdAt, name, url, path, referrer, title, viewportW, "
                        "sessionId, country, props as JSON; text cells starting with = + - @ tab or CR get a "
                        "leading ' and stay quoted) or a JSON array of the same objects",
         "headers": {"Content-Disposition": {"schema": {"type": "string"}},
                     "X-Export-Limit": {"schema": {"type": "integer"}, "description": "effective row limit"}},
         "content": {"text/csv": {"schema": {"type": "string"}},
                     "application/json": {"schema": {"type": "array", "items": ref("StoredEvent")}}}},
        shared=False,
    ),
}
PATHS["/api/analytics/export"]["get"]["responses"].update(site_errors(403, 429))
PATHS["/api/analytics/events"]["get"]["responses"].update(site_errors(403))

SCHEMAS = {
    "Point": {"type": "object", "required": ["timestamp", "value", "label"], "properties": {
        "timestamp": {"type": "string", "format": "date-time"}, "value": {"type": "integer"},
        "label": {"type": "string"}}},
    "TopRow": {"type": "object", "required": ["key", "count", "percentage"], "properties": {
        "key": {"type": "string"}, "count": {"type": "integer"}, "percentage": {"type": "number"}}},
    "StoredEvent": {"type": "object", "properties": {
        "id": {"type": "string"}, "name": {"type": "string"}, "url": {"type": ["string", "null"]},
        "path": {"type": ["string", "null"]}, "referrer": {"type": ["string", "null"]},
        "title": {"type": ["string", "null"]}, "viewportW": {"type": ["integer", "null"]}, "props": {},
        "sessionId": {"type": ["string", "null"]}, "country": {"type": ["string", "null"]},
        "createdAt": {"type": "string", "format": "date-time"}}},
    "Overview": {"type": "object", "required": [
        "totalEvents", "totalPageviews", "uniqueVisitors", "bounceRate", "avgSessionDuration", "topPages",
        "topReferrers", "topCountries", "timeSeries"], "properties": {
        "totalEvents": {"type": "integer"}, "totalPageviews": {"type": "integer"},
        "uniqueVisitors": {"type": "integer"}, "sessions": {"type": "integer"},
        "bounceRate": {"type": "number", "description": "percent of sessions with exactly one pageview"},
        "avgSessionDuration": {"type": "integer", "description": "milliseconds"},
        "topPages": {"type": "array", "items": ref("TopRow")},
        "topReferrers": {"type": "array", "items": ref("TopRow")},
        "topCountries": {"type": "array", "items": ref("TopRow")},
        "timeSeries": {"type": "array", "items": ref("Point")},
        "range": {"type": "string"}, "interval": {"type": "string"}, "timezone": ref("TimeZone"),
        "from": {**_DAY, "description": "the first day of a calendar period or custom range"},
        "to": {**_DAY, "description": "its last day"}}},
}
