"""Plausible's Stats API on Tally's site analytics: v2's POST /api/v2/query (app/views/stats_api.py) and the
legacy v1's GET /api/v1/stats/* (app/views/stats_api_v1.py); and its Sites API's reads
(app/views/plausible_sites.py)."""

from __future__ import annotations

from app.openapi.common import KEYED, RATE_HEADERS, json_body, path_param, query, ref
from app.views.plausible_sites import MAX_LIMIT as SITES_MAX
from app.views.stats_api_v1 import BREAKDOWN_LIMIT, BREAKDOWN_MAX
from app.views.stats_api_v1 import PERIODS as V1_PERIODS
from app.views.stats_query import (
    DIMENSIONS,
    FILTER_ONLY,
    LAST_DAYS,
    MAX_DIMENSIONS,
    MAX_LIMIT,
    MAX_VALUES,
    METRICS,
    OPERATORS,
    PERIODS,
    PROPS,
    TIME,
)

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_DIMENSION = {"anyOf": [{"enum": [*DIMENSIONS, *TIME]}, {"type": "string", "pattern": f"^{PROPS}.+"}]}
_DAY = {"type": "string", "format": "date"}
_FILTER = {"type": "array", "description": "[operator, dimension, [values]]: is (any of the values), is_not "
                                           "(none of them), contains (any; ignoring case); or [\"and\", [filters]]",
           "prefixItems": [{"enum": [*OPERATORS, "and"]},
                           {"anyOf": [_DIMENSION, {"enum": list(FILTER_ONLY)}, {"type": "array"}]},
                           {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                            "maxItems": MAX_VALUES},
                           {"type": "object", "properties": {"case_sensitive": {"type": "boolean"}},
                            "description": "only what Tally does: false with contains, true with is and is_not"}],
           "minItems": 2, "maxItems": 4}

_ERRORS = {str(s): json_body(_ERROR, "error", RATE_HEADERS) for s in (400, 401, 403, 404, 413, 429, 503)}
_V1_TAGS = ["site analytics"]
_V1 = [query("site_id", {"type": "string", "minLength": 1}, True, "the site's domain (or Tally's site id)"),
       query("period", {"enum": [*V1_PERIODS, "custom"], "default": "30d"}, description="the site's days"),
       query("date", {"type": "string"}, description="the day the period is relative to (YYYY-MM-DD, default "
                                                      "today), or with period=custom the first and last day, "
                                                      "comma-separated"),
       query("filters", {"type": "string"}, description="dimension==value or !=, joined by ;"),
       query("metrics", {"type": "string", "default": "visitors"}, description="comma-separated")]
_NUMBERS = {"type": ["number", "null"]}
_SITE = {"type": "object", "required": ["domain", "timezone"], "properties": {
    "domain": {"type": "string"}, "timezone": {"type": "string"}}}


def _v1(summary: str, params: list, body: dict) -> dict:
    return {"get": {"summary": summary, "tags": _V1_TAGS, "security": KEYED, "parameters": params,
                    "responses": {"200": json_body(body, headers=RATE_HEADERS), **_ERRORS}}}


PATHS = {
    "/api/v1/stats/aggregate": _v1(
        "Plausible's v1 aggregate: the period's metrics, with compare=previous_period their change",
        [*_V1, query("compare", {"enum": ["previous_period"]})],
        {"type": "object", "required": ["results"], "properties": {"results": {
            "type": "object", "additionalProperties": {"type": "object", "required": ["value"], "properties": {
                "value": _NUMBERS, "change": _NUMBERS}}}}}),
    "/api/v1/stats/timeseries": _v1(
        "Plausible's v1 timeseries: every day (hour, week or month) of the period",
        [*_V1, query("interval", {"enum": ["date", "day", "hour", "week", "month"]},
                     description="default: month for 6mo and 12mo, else date (days)")],
        {"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {
            "type": "object", "required": ["date"], "additionalProperties": _NUMBERS,
            "properties": {"date": {"type": "string"}}}}}}),
    "/api/v1/stats/breakdown": _v1(
        "Plausible's v1 breakdown by one property",
        [*_V1, query("property", {"type": "string", "minLength": 1}, True, "e.g. event:page, visit:source"),
         query("limit", {"type": "integer", "minimum": 1, "maximum": BREAKDOWN_MAX, "default": BREAKDOWN_LIMIT}),
         query("page", {"type": "integer", "minimum": 1, "default": 1})],
        {"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {
            "type": "object", "additionalProperties": {"type": ["number", "string", "null"]}}}}}),
    "/api/v1/stats/realtime/visitors": _v1(
        "Plausible's v1 current visitors: those of the last 5 minutes, a bare number",
        _V1[:1], {"type": "integer", "minimum": 0}),
    "/api/v1/sites": _v1(
        "Plausible's Sites API: the sites this key reads (its workspace's), newest first",
        [query("limit", {"type": "integer", "minimum": 1, "maximum": SITES_MAX, "default": SITES_MAX}),
         query("after", {"type": "string"}, description="the cursor of the page before (meta.after)")],
        {"type": "object", "required": ["sites", "meta"], "properties": {
            "sites": {"type": "array", "items": _SITE},
            "meta": {"type": "object", "properties": {"after": {"type": ["string", "null"]},
                                                      "before": {"type": "null"}, "limit": {"type": "integer"}}}}}),
    "/api/v1/sites/{site_id}": {
        "parameters": [path_param("site_id")],
        **_v1("Plausible's Sites API: one site, named by its domain", [],
              {**_SITE, "properties": {**_SITE["properties"], "custom_properties": {
                  "type": "array", "items": {"type": "string"}}}}),
    },
    "/api/v2/query": {
        "post": {
            "summary": "Query a site's stats the way Plausible's Stats API v2 does",
            "description": ("A Tally API key with the read scope (rate-limited as the keyed API's reads) reads a "
                            "site of its workspace, named by its domain. The numbers are the dashboard's, in "
                            "Plausible's units (visit_duration in seconds). Up to three dimensions; time "
                            "dimensions by the hour, day, week or month of the site's time zone; filters is, "
                            "is_not, contains and and. Anything else is a 400 naming it."),
            "tags": ["site analytics"], "security": KEYED,
            "requestBody": {"required": True, "content": {"application/json": {"schema": ref("StatsQueryIn")}}},
            "responses": {"200": json_body(ref("StatsQueryOut"), headers=RATE_HEADERS), **_ERRORS},
        },
    },
}

SCHEMAS = {
    "StatsQueryIn": {
        "type": "object", "required": ["site_id", "metrics", "date_range"], "additionalProperties": False,
        "properties": {
            "site_id": {"type": "string", "minLength": 1, "description": "the site's domain (or Tally's site id)"},
            "metrics": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"enum": list(METRICS)}},
            "date_range": {"anyOf": [{"enum": [*LAST_DAYS, "6mo", *PERIODS]},
                                     {"type": "array", "prefixItems": [_DAY, _DAY], "minItems": 2, "maxItems": 2}],
                           "description": "the site's days: Nd are N days to today included"},
            "dimensions": {"type": "array", "maxItems": MAX_DIMENSIONS, "uniqueItems": True, "items": _DIMENSION,
                           "description": "one time dimension at most; event:goal, visit:entry_page and "
                                          "visit:exit_page alone"},
            "filters": {"type": "array", "items": _FILTER},
            "order_by": {"type": "array", "items": {"type": "array", "prefixItems": [
                {"type": "string"}, {"enum": ["asc", "desc"]}], "minItems": 2, "maxItems": 2}},
            "include": {"type": "object", "additionalProperties": False, "properties": {
                "imports": {"type": "boolean"}, "time_labels": {"type": "boolean"}}},
            "pagination": {"type": "object", "additionalProperties": False, "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": MAX_LIMIT},
                "offset": {"type": "integer", "minimum": 0, "default": 0}}},
        },
    },
    "StatsQueryOut": {
        "type": "object", "required": ["results", "meta", "query"],
        "properties": {
            "results": {"type": "array", "items": {"type": "object", "required": ["metrics", "dimensions"],
                                                   "properties": {
                "metrics": {"type": "array", "description": "in the order of the query's metrics",
                            "items": {"type": ["number", "null"]}},
                "dimensions": {"type": "array", "items": {"type": "string"}}}}},
            "meta": {"type": "object", "properties": {"time_labels": {"type": "array", "items": {"type": "string"}}}},
            "query": {"type": "object", "description": "the query, its site_id the domain and its date_range the "
                                                       "window's first and last second on the site's clock"},
        },
    },
}
