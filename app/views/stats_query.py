"""The query of Plausible's Stats API (`POST /api/v2/query`, app/views/stats_api.py), read into Tally's terms:
a site, a window of its days, metrics, up to three dimensions, filters, an order and a page of rows. What Tally
cannot answer the way Plausible would is a 400 naming it (docs/decisions.md, "Plausible's Stats API", lists the
few answers that differ by design, such as a contains that ignores case).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from app.responses import SiteError
from app.views.analytics_params import (
    ALL,
    CUSTOM,
    FIRST_DAY,
    LAST_DAY,
    MAX_POINTS,
    RangeAsked,
    Window,
    days_window,
    local_today,
    month_start,
    window_of,
)
from storage.analytics_breakdown import TIME_BUCKETS
from storage.site_filters import Filter

KEYS = ("site_id", "metrics", "date_range", "dimensions", "filters", "order_by", "include", "pagination")
# Plausible's dimensions, as Tally's breakdown properties and filter dimensions.
VISIT_PROPS = ("source", "referrer", "channel", "utm_source", "utm_medium", "utm_campaign", "utm_content",
               "utm_term", "device", "browser", "browser_version", "os", "os_version", "country")
DIMENSIONS = {"event:page": "page", "event:goal": "goal", "visit:entry_page": "entry_page",
              "visit:exit_page": "exit_page", "visit:region_name": "region", "visit:city_name": "city",
              **{f"visit:{p}": p for p in VISIT_PROPS}}
FILTER_ONLY = {"event:name": "event"}
PROPS = "event:props:"
# Plausible's dimensions Tally keeps otherwise: the 400 says what to ask for instead.
INSTEAD = {"visit:country_name": "visit:country (ISO codes)", "visit:region": "visit:region_name",
           "visit:city": "visit:city_name"}
TIME = ("time", *TIME_BUCKETS)
OPERATORS = {"is": "==", "is_not": "!=", "contains": "~="}
METRICS = ("visitors", "visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration", "events",
           "percentage", "conversion_rate", "scroll_depth", "time_on_page")
GOAL_METRICS = ("visitors", "events", "conversion_rate", "percentage")
PAGE_METRICS = ("scroll_depth", "time_on_page")  # per page only (storage/analytics_engagement.py)
MAX_DIMENSIONS = 3
ALONE = ("goal", "entry_page", "exit_page")  # dimensions not combined with others
MAX_NESTING = 8
MAX_VALUES = 100  # of one filter
MAX_LIMIT = 10_000  # Plausible's default page of rows, and Tally's cap
# date_range names: days back from today (today included), or Tally's calendar periods.
LAST_DAYS = {"7d": 7, "28d": 28, "30d": 30, "91d": 91}
PERIODS = {"day": "today", "month": "month", "12mo": "12mo", "year": "year", "all": ALL}


@dataclass(frozen=True, slots=True)
class StatsQuery:
    site: str  # a domain, or Tally's site id
    metrics: list[str]
    asked: RangeAsked | int | str  # a Tally range, LAST_DAYS' count, or "6mo"
    dimensions: tuple[str | None, ...]  # Tally breakdown properties or TIME_BUCKETS keys (None: "time", placed
    # by the window, stats_api.auto_time)
    time: bool  # one of them is time
    filters: tuple[Filter, ...]
    order: list[tuple[str, bool]]  # (metric or dimension name, descending)
    limit: int
    offset: int
    time_labels: bool
    echo: dict = field(default_factory=dict)  # the query as asked, for the answer's `query`


def _fail(message: str) -> SiteError:
    return SiteError(400, message)


def parse(body: Any) -> StatsQuery:
    """The query, or a 400 naming what is wrong or what Tally does not offer."""
    if not isinstance(body, dict):
        raise _fail("the query must be a JSON object")
    unknown = sorted(set(body) - set(KEYS))
    if unknown:
        raise _fail(f"unknown key: {unknown[0]}")
    site = body.get("site_id")
    if not isinstance(site, str) or not site:
        raise _fail("site_id is required: the site's domain")
    metrics = _metrics(body.get("metrics"))
    dims = body.get("dimensions", [])
    if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
        raise _fail("dimensions must be a list of dimension names")
    dimensions, time = _dimensions(dims), any(d in TIME for d in dims)
    filters = tuple(_filters(body.get("filters", [])))
    _check_metrics(metrics, dimensions, filters)
    include = body.get("include", {})
    if not isinstance(include, dict) or set(include) - {"imports", "time_labels"} or \
            not all(isinstance(v, bool) for v in include.values()):
        raise _fail("include takes imports and time_labels, true or false (Tally has no imported stats)")
    if include.get("time_labels") and not time:
        raise _fail("include.time_labels needs a time dimension")
    return StatsQuery(site, metrics, _date_range(body.get("date_range")), dimensions, time, filters,
                      _order(body.get("order_by"), metrics, dims), *_pagination(body.get("pagination", {})),
                      bool(include.get("time_labels")), {k: body[k] for k in KEYS if k in body})


def _metrics(metrics: Any) -> list[str]:
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise _fail("metrics must be a non-empty list of metric names")
    for m in metrics:
        if m not in METRICS:
            raise _fail(f"invalid metric: {m}")
    if len(set(metrics)) != len(metrics):
        raise _fail("a metric may be asked for once")
    return metrics


def _dimension(name: str) -> str | None:
    if name in DIMENSIONS:
        return DIMENSIONS[name]
    if name.startswith(PROPS) and len(name) > len(PROPS):
        return "props:" + name[len(PROPS):]
    if name in TIME:
        return None if name == "time" else name  # "time" is placed by the window (stats_api.auto_time)
    if name in INSTEAD:
        raise _fail(f"Tally does not keep {name}: use {INSTEAD[name]}")
    raise _fail(f"invalid dimension: {name}")


def _dimensions(dims: list[str]) -> tuple[str | None, ...]:
    """The dimensions as Tally's properties: up to MAX_DIMENSIONS, one of them time at most; a goal or a visit's
    entry or exit page alone (they group visits or goals, not events)."""
    if len(dims) > MAX_DIMENSIONS:
        raise _fail(f"at most {MAX_DIMENSIONS} dimensions")
    if len(set(dims)) != len(dims):
        raise _fail("a dimension may be asked for once")
    if sum(d in TIME for d in dims) > 1:
        raise _fail("one time dimension at most")
    out = tuple(_dimension(d) for d in dims)
    if len(out) > 1 and any(d in ALONE for d in out):
        raise _fail("event:goal, visit:entry_page and visit:exit_page break a query down alone")
    return out


def _check_metrics(metrics: list[str], dimensions: tuple[str | None, ...], filters: tuple[Filter, ...]) -> None:
    if "percentage" in metrics and not dimensions:
        raise _fail("percentage needs a dimension")
    goal_filtered = any(f.dimension == "goal" for f in filters)
    if "conversion_rate" in metrics and "goal" not in dimensions and not goal_filtered:
        raise _fail("conversion_rate needs the event:goal dimension or filter")
    page_only = [m for m in metrics if m in PAGE_METRICS]
    if page_only and dimensions != ("page",):
        raise _fail(f"{page_only[0]} needs the event:page dimension, alone")
    if "goal" in dimensions and any(m not in GOAL_METRICS for m in metrics):
        raise _fail(f"by event:goal, Tally offers {', '.join(GOAL_METRICS)}")


def _date_range(value: Any) -> RangeAsked | int | str:
    if isinstance(value, str):
        if value in LAST_DAYS:
            return LAST_DAYS[value]
        if value == "6mo":
            return value
        if value in PERIODS:
            return RangeAsked(PERIODS[value])
    elif isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        try:
            first, last = date.fromisoformat(value[0]), date.fromisoformat(value[1])
        except ValueError:
            raise _fail("date_range takes two days, YYYY-MM-DD (Tally has no ranges of times of day)") from None
        if not (FIRST_DAY <= first <= last <= LAST_DAY) or (last - first).days >= MAX_POINTS:
            raise _fail(f"date_range: the first day not after the last, at most {MAX_POINTS} days, from 2000")
        return RangeAsked(CUSTOM, (first, last))
    raise _fail("invalid date_range: day, 7d, 28d, 30d, 91d, month, 6mo, 12mo, year, all, or [first, last] days")


def window(asked: RangeAsked | int | str, time_zone: str, since: date | None) -> Window:
    """The site's days of a date_range, as of today in its time zone."""
    if isinstance(asked, RangeAsked):
        return window_of(asked, time_zone, since=since)
    today = local_today(time_zone)
    if asked == "6mo":  # this month and the 5 before it
        return days_window(CUSTOM, month_start(today, 5), today, time_zone, "day")
    return days_window(CUSTOM, today - timedelta(days=int(asked) - 1), today, time_zone, "day")


def _filters(value: Any, depth: int = 0) -> list[Filter]:
    """Plausible's filters (a list under an implicit `and`), as Tally's: `is` (any of its values), `is_not` (none
    of them) and `contains` (any), and `and` of such filters (nested at most MAX_NESTING deep)."""
    if not isinstance(value, list):
        raise _fail("filters must be a list")
    if depth > MAX_NESTING:
        raise _fail(f"and filters nest at most {MAX_NESTING} deep")
    out: list[Filter] = []
    for f in value:
        if not isinstance(f, list) or not f or not isinstance(f[0], str):
            raise _fail("a filter is [operator, dimension, [values]]")
        if f[0] == "and" and len(f) == 2:
            out += _filters(f[1], depth + 1)
            continue
        if f[0] not in OPERATORS:
            raise _fail(f"Tally does not offer the {f[0]} filter: only is, is_not, contains and and")
        if len(f) not in (3, 4) or not isinstance(f[1], str) or not isinstance(f[2], list) or not f[2] or \
                not all(isinstance(v, str) and v for v in f[2]):
            raise _fail("a filter is [operator, dimension, [values]]")
        if len(f[2]) > MAX_VALUES:
            raise _fail(f"a filter takes at most {MAX_VALUES} values")
        if len(f) == 4 and f[3] != {"case_sensitive": f[0] != "contains"}:
            raise _fail("Tally's contains ignores case and its is and is_not match exactly: "
                        "case_sensitive may only say so")
        name = f[1]
        dim = FILTER_ONLY.get(name) or _dimension(name)
        if dim is None or name in TIME:
            raise _fail("time is not a filter: set date_range")
        if dim == "goal" and f[0] == "contains":
            raise _fail("event:goal filters take is or is_not")
        values = [v.upper() for v in f[2]] if dim == "country" else f[2]
        out.append(Filter(dim, OPERATORS[f[0]], values[0], tuple(values[1:])))  # type: ignore[arg-type]
    return out


def _order(value: Any, metrics: list[str], dims: list[str]) -> list[tuple[str, bool]]:
    """order_by as (name, descending); by default the time ascending, else the first metric descending."""
    if value is None:
        return [(dims[0], False)] if dims and dims[0] in TIME else [(metrics[0], True)]
    if not isinstance(value, list) or not all(isinstance(o, list) and len(o) == 2 and o[0] in (*metrics, *dims)
                                              and o[1] in ("asc", "desc") for o in value):
        raise _fail("order_by is a list of [metric or dimension of the query, asc or desc]")
    return [(name, direction == "desc") for name, direction in value]


def _pagination(value: Any) -> tuple[int, int]:
    if not isinstance(value, dict) or set(value) - {"limit", "offset"}:
        raise _fail("pagination takes limit and offset")
    limit, offset = value.get("limit", MAX_LIMIT), value.get("offset", 0)
    if type(limit) is not int or type(offset) is not int or not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise _fail(f"pagination: limit 1 to {MAX_LIMIT}, offset 0 or more")
    return limit, offset
