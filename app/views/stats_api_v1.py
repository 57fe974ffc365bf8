"""Plausible's legacy Stats API (v1): GET /api/v1/stats/aggregate, /timeseries, /breakdown and
/realtime/visitors, which most published clients still call (e.g. the `plausible-mcp` assistant tools on PyPI).
Each request is read into a v2 query (app/views/stats_query.py) and answered by the same reads
(app/views/stats_api.py), then shaped as v1 answers: {"results": {metric: {"value"}}}, {"results": [{"date",
metric...}]}, {"results": [{property, metric...}]} and a bare number.
"""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta

from aiohttp import web

from app.appkeys import POOL, SITE_RUNTIME
from app.responses import SiteError, json_response
from app.views.analytics import bounce_rate_change, change
from app.views.analytics_params import FIRST_DAY, LAST_DAY, month_start
from app.views.stats_api import answer, keyed, keyed_site, time_labels, whole_number
from app.views.stats_query import parse

PERIODS = ("day", "7d", "30d", "month", "6mo", "12mo")
MONTHS_BACK = {"6mo": 5, "12mo": 11}  # this month and the n before it
BREAKDOWN_LIMIT, BREAKDOWN_MAX = 100, 1000
REALTIME_SECONDS = 300  # Plausible's current visitors: the last 5 minutes


def _day(value: str, name: str) -> date:
    """A day of the range the analytics reads take (2000 to 2099)."""
    try:
        day = date.fromisoformat(value)
    except ValueError:
        day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        raise SiteError(400, f"invalid {name}: YYYY-MM-DD, from 2000 to 2099")
    return day


def date_range(period: str, at: str | None) -> str | list[str]:
    """v1's period, relative to `date` when given (default today), as a v2 date_range."""
    if period == "custom":
        first, _, last = (at or "").partition(",")
        if not last:
            raise SiteError(400, "period=custom takes date=YYYY-MM-DD,YYYY-MM-DD")
        return [str(_day(first, "date")), str(_day(last, "date"))]
    if period not in PERIODS:
        raise SiteError(400, f"invalid period: one of {', '.join(PERIODS)} or custom")
    if not at:
        return period
    day = _day(at, "date")
    if period in ("7d", "30d"):
        return [str(day - timedelta(days=int(period[:-1]) - 1)), str(day)]
    if period == "day":
        return [str(day), str(day)]
    next_month = month_start(day, -1)  # the calendar month of `date` (and the months before it), whole
    return [str(month_start(day, MONTHS_BACK.get(period, 0))), str(next_month - timedelta(days=1))]


def _filters(raw: str) -> list:
    """v1's `filters`: dimension==value or !=, joined by `;`; `a|b` (any of) becomes several values."""
    out = []
    for term in filter(None, raw.split(";")):
        for op, name in (("!=", "is_not"), ("==", "is")):
            dimension, found, value = term.partition(op)
            if found:
                out.append([name, dimension.strip(), value.split("|")])
                break
        else:
            raise SiteError(400, f"invalid filter: {term} (dimension==value or dimension!=value)")
    return out


def _query(request: web.Request, **extra) -> dict:
    q = request.query
    return {"site_id": q.get("site_id", ""), "date_range": date_range(q.get("period") or "30d", q.get("date")),
            "metrics": [m for m in (q.get("metrics") or "visitors").split(",") if m],
            "filters": _filters(q.get("filters") or ""), **extra}


@keyed
async def aggregate(request: web.Request) -> web.Response:
    compare = request.query.get("compare")
    if compare not in (None, "", "previous_period"):
        raise SiteError(400, "invalid compare: previous_period")
    q = parse(_query(request))
    asked = q.metrics
    if compare and "visits" not in asked:  # a period without visits has no bounce rate to compare
        q = dataclasses.replace(q, metrics=[*asked, "visits"])
    found = await answer(request, q, compare=bool(compare))
    values = dict(zip(q.metrics, found.results[0][1], strict=True))
    results = {m: {"value": values[m]} for m in asked}
    if found.previous is not None:
        before = dict(zip(q.metrics, found.previous, strict=True))
        for m in asked:
            results[m]["change"] = bounce_rate_change(values[m], before[m], (values["visits"], before["visits"])) \
                if m == "bounce_rate" else change(values[m], before[m])
    return json_response({"results": results})


@keyed
async def timeseries(request: web.Request) -> web.Response:
    """Every bucket of the period, zero where nothing happened: by the day (interval=date), the hour, the week
    or the month."""
    interval = request.query.get("interval")
    if interval is None:  # Plausible's default: months for 6mo and 12mo, else days
        interval = "month" if (request.query.get("period") or "30d") in MONTHS_BACK else "date"
    dimension = {"date": "time:day", "day": "time:day", "hour": "time:hour", "week": "time:week",
                 "month": "time:month"}.get(interval)
    if dimension is None:
        raise SiteError(400, "invalid interval: date, hour, week or month")
    q = parse(_query(request, dimensions=[dimension]))
    found = await answer(request, q)
    counted = {dims[0]: values for dims, values in found.results}
    zero = [0.0 if m in ("bounce_rate", "views_per_visit") else 0 for m in q.metrics]
    return json_response({"results": [{"date": label, **dict(zip(q.metrics, counted.get(label, zero), strict=True))}
                                      for label in time_labels(found.window, found.time)]})


@keyed
async def breakdown(request: web.Request) -> web.Response:
    prop = request.query.get("property") or ""
    if not prop:
        raise SiteError(400, "property is required, e.g. event:page or visit:source")
    limit = whole_number(request, "limit", BREAKDOWN_LIMIT, 1, BREAKDOWN_MAX)
    page = whole_number(request, "page", 1, 1, 10**6)
    q = parse(_query(request, dimensions=[prop], pagination={"limit": limit, "offset": (page - 1) * limit}))
    found = await answer(request, q)
    name = prop.rsplit(":", 1)[-1]  # event:page -> page, event:props:plan -> plan
    return json_response({"results": [{name: dims[0], **dict(zip(q.metrics, values, strict=True))}
                                      for dims, values in found.results]})


@keyed
async def realtime_visitors(request: web.Request) -> web.Response:
    """The site's visitors of the last 5 minutes, from the live window (not the store), as a bare number."""
    async with request.config_dict[POOL].acquire() as conn:
        row = await keyed_site(conn, request, request.query.get("site_id", ""))
    runtime = request.config_dict[SITE_RUNTIME]
    now_ms = int(runtime.clock().timestamp() * 1000)
    snap = await runtime.realtime.snapshot(row["id"], now_ms, REALTIME_SECONDS)
    return json_response(snap.active_visitors)


def setup_stats_api_v1_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/v1/stats/aggregate", aggregate)
    router.add_get("/v1/stats/timeseries", timeseries)
    router.add_get("/v1/stats/breakdown", breakdown)
    router.add_get("/v1/stats/realtime/visitors", realtime_visitors)

