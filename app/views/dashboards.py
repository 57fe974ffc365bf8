"""Keyed dashboards and charts: list/get (spec), create/change/delete, chart data and public sharing."""

from __future__ import annotations

import math
import secrets
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from aiohttp import web
from msgspec import UNSET, Meta, UnsetType

from app.appkeys import POOL
from app.auth import key_of, requires
from app.bodies import field_error, field_of, not_blank, read_body, reject_unstorable
from app.input_rules import decode_json
from app.net import base_url
from app.responses import ApiError, invalid, iso_ms, json_response, not_found
from app.schemas import EventName
from app.timestamps import through
from app.views.analytics_params import analytics_store
from app.views.params import cursor_param, int_param, page_response, time_param
from storage import chart_data
from storage import dashboards as store
from storage.clickhouse import AnalyticsStore
from storage.ids import new_id

T = TypeVar("T")
BODY_LIMIT = 256 * 1024
MAX_CHARTS = 50
MAX_BUCKETS = 1000
DEFAULT_RANGE = timedelta(days=7)
# Defining what a chart shows, or publishing it, exposes event data through chart data and the public
# link: it needs read as well as write, so a write-only (ingestion) key cannot read through a share.
CHANGE_SCOPES = ("read", "write")

Name = Annotated[str, Meta(min_length=1, max_length=200)]
Description = Annotated[str, Meta(max_length=2000)]
Property = Annotated[str, Meta(min_length=1, max_length=255)]
ChartType = Literal["line", "bar", "pie", "funnel", "table"]
Operator = Literal["eq", "neq", "contains", "gt", "lt"]
Steps = Annotated[list[EventName], Meta(min_length=1, max_length=9)]


class FilterIn(msgspec.Struct, forbid_unknown_fields=True):
    property: Property
    operator: Operator
    value: Annotated[str, Meta(max_length=1000)] | int | float | bool

    def __post_init__(self) -> None:
        if self.operator in ("gt", "lt") and isinstance(self.value, (bool, str)):
            raise field_error("value", f"must be a number for operator '{self.operator}'")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise field_error("value", "must be a finite number")


class ChartIn(msgspec.Struct, forbid_unknown_fields=True):
    title: Name
    type: ChartType
    event: EventName
    filters: Annotated[list[FilterIn], Meta(max_length=20)] = []
    group_by: Property | None = None
    # Funnel charts only: the events after `event`, in order (the funnel is [event, *steps]).
    steps: Steps | None = None

    def __post_init__(self) -> None:
        not_blank("title", self.title)
        if self.type == "funnel":
            if not self.steps:
                raise field_error("steps", "a funnel chart needs at least one step after `event`")
            if self.group_by is not None:
                raise field_error("group_by", "funnel charts cannot be grouped")
        elif self.steps is not None:
            raise field_error("steps", "only funnel charts have steps")


class ChartPatch(msgspec.Struct, forbid_unknown_fields=True):
    title: Name | UnsetType = UNSET
    type: ChartType | UnsetType = UNSET
    event: EventName | UnsetType = UNSET
    filters: Annotated[list[FilterIn], Meta(max_length=20)] | UnsetType = UNSET
    group_by: Property | UnsetType | None = UNSET
    steps: Steps | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        not_blank("title", self.title)


class DashboardIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    description: Description | None = None
    charts: Annotated[list[ChartIn], Meta(max_length=MAX_CHARTS)] = []

    def __post_init__(self) -> None:
        not_blank("name", self.name)


class DashboardPatch(msgspec.Struct, forbid_unknown_fields=True):
    name: Name | UnsetType = UNSET
    description: Description | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        not_blank("name", self.name)


def _problem(exc: msgspec.ValidationError) -> ApiError:
    field, message = field_of(exc)
    return invalid(f"{field}: {message}" if field else message, fields=[{"field": field, "message": message}])


def _decode(body: bytes, schema: type[T]) -> T:
    try:
        value = decode_json(body, type=schema)
    except msgspec.ValidationError as exc:
        raise _problem(exc) from None
    except msgspec.DecodeError:
        raise invalid("request body is not valid JSON") from None
    reject_unstorable(body, value)
    return value


def path_id(request: web.Request, name: str, what: str) -> str:
    """An id from the path; one that cannot exist (too long, or a NUL PostgreSQL cannot bind) is a 404."""
    value = request.match_info[name]
    if len(value) > 64 or "\x00" in value:
        raise not_found(f"no {what} with that id")
    return value


def _dash(request: web.Request) -> str:
    return path_id(request, "id", "dashboard")


def _chart(request: web.Request) -> str:
    return path_id(request, "chart_id", "chart")


def _chart_fields(chart: ChartIn) -> dict[str, Any]:
    return {"title": chart.title, "type": chart.type, "event": chart.event,
            "filters": msgspec.to_builtins(chart.filters), "group_by": chart.group_by, "steps": chart.steps}


def chart_json(row) -> dict:
    out = {"id": row["id"], "title": row["title"], "type": row["type"], "event": row["event"],
           "filters": row["filters"], "group_by": row["group_by"]}
    if row["type"] == "funnel":
        out["steps"] = row["steps"] or []
    return out


def dashboard_json(request: web.Request, row, charts) -> dict:
    token = row["public_token"]
    return {"id": row["id"], "name": row["name"], "description": row["description"],
            "charts": [chart_json(c) for c in charts],
            "created_at": iso_ms(row["created_at"]), "updated_at": iso_ms(row["updated_at"]),
            "public_url": f"{base_url(request)}/public/dashboards/{token}" if token else None}


def data_range(request: web.Request) -> tuple[datetime, datetime, str]:
    """from/to/interval query parameters: default the last 7 days by day; at most MAX_BUCKETS buckets."""
    interval = request.query.get("interval") or "day"
    if interval not in chart_data.INTERVALS:
        raise invalid("interval must be hour or day", fields=[{"field": "interval", "message": "hour or day"}])
    end = time_param(request, "to") or datetime.now(UTC)
    try:
        start = time_param(request, "from") or end - DEFAULT_RANGE
    except OverflowError:
        raise invalid("from is out of range", fields=[{"field": "from", "message": "out of range"}]) from None
    if start > end:
        raise invalid("from must not be after to", fields=[{"field": "from", "message": "after to"}])
    if (chart_data.truncate(end, interval) - chart_data.truncate(start, interval)) / chart_data.INTERVALS[
            interval] >= MAX_BUCKETS:
        raise invalid(f"the range holds more than {MAX_BUCKETS} {interval} buckets; narrow it or use a wider interval",
                      fields=[{"field": "interval", "message": f"more than {MAX_BUCKETS} buckets"}])
    return start, end, interval


async def chart_data_json(db: AnalyticsStore, workspace_id: int, env: str, chart, start: datetime,
                          end: datetime, interval: str) -> dict:
    """line/bar: one series per group with a point per bucket. pie/table/funnel: one series per group
    (or funnel step) holding one point, stamped with the range start, that carries the total. `end` is
    echoed as given and compared as the millisecond it covers (app/timestamps.py)."""
    echoed, end = end, through(end)
    if chart["type"] in chart_data.TIME_SERIES_TYPES:
        found = await chart_data.time_series(db, workspace_id, env, chart, start, end, interval)
        series = [{"name": s.name, "points": [{"timestamp": iso_ms(t), "value": v} for t, v in s.points]}
                  for s in found]
    else:
        if chart["type"] == "funnel":
            totals = await chart_data.funnel(db, workspace_id, env, chart, start, end)
        else:
            totals = await chart_data.grouped_totals(db, workspace_id, env, chart, start, end)
        series = [{"name": name, "points": [{"timestamp": iso_ms(start), "value": value}]}
                  for name, value in totals]
    return {"chart_id": chart["id"], "type": chart["type"], "interval": interval,
            "from": iso_ms(start), "to": iso_ms(echoed), "series": series}


async def _full(request: web.Request, conn, row) -> web.Response:
    return json_response(dashboard_json(request, row, await store.charts_of(conn, row["id"])))


@requires("read", "query")
async def list_dashboards(request: web.Request) -> web.Response:
    key = key_of(request)
    limit = int_param(request, "limit", 50, 1, 200)
    (after,) = cursor_param(request, str) or ("",)
    async with request.config_dict[POOL].acquire() as conn:
        rows = await store.list_dashboards(conn, key.workspace_id, key.env, after_id=after, limit=limit + 1)
    return page_response(rows, limit, lambda r: {
        "id": r["id"], "name": r["name"], "created_at": iso_ms(r["created_at"]),
        "updated_at": iso_ms(r["updated_at"]), "chart_count": r["chart_count"]}, lambda r: (r["id"],))


@requires(CHANGE_SCOPES, "query")
async def create_dashboard(request: web.Request) -> web.Response:
    key = key_of(request)
    body = _decode(await read_body(request, BODY_LIMIT), DashboardIn)
    dashboard_id = new_id("dsh")
    async with request.config_dict[POOL].acquire() as conn:
        await store.create_dashboard(
            conn, key.workspace_id, key.env, dashboard_id, name=body.name, description=body.description,
            charts=[(new_id("chrt"), _chart_fields(c)) for c in body.charts],
        )
        row = await store.get_dashboard(conn, key.workspace_id, key.env, dashboard_id)
        response = await _full(request, conn, row)
    response.set_status(201)
    return response


async def _own_dashboard(request: web.Request, conn):
    key = key_of(request)
    row = await store.get_dashboard(conn, key.workspace_id, key.env, _dash(request))
    if row is None:
        raise not_found("no dashboard with that id")
    return row


@requires("read", "query")
async def get_dashboard(request: web.Request) -> web.Response:
    async with request.config_dict[POOL].acquire() as conn:
        return await _full(request, conn, await _own_dashboard(request, conn))


@requires(CHANGE_SCOPES, "query")
async def patch_dashboard(request: web.Request) -> web.Response:
    key = key_of(request)
    body = _decode(await read_body(request, BODY_LIMIT), DashboardPatch)
    changes = {k: v for k, v in msgspec.structs.asdict(body).items() if v is not UNSET}
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.update_dashboard(conn, key.workspace_id, key.env, _dash(request),
                                           changes=changes)
        if row is None:
            raise not_found("no dashboard with that id")
        return await _full(request, conn, row)


@requires("write", "query")
async def delete_dashboard(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        if not await store.delete_dashboard(conn, key.workspace_id, key.env, _dash(request)):
            raise not_found("no dashboard with that id")
    return web.Response(status=204)


@requires(CHANGE_SCOPES, "query")
async def add_chart(request: web.Request) -> web.Response:
    key = key_of(request)
    chart = _decode(await read_body(request, BODY_LIMIT), ChartIn)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.add_chart(conn, key.workspace_id, key.env, _dash(request), new_id("chrt"),
                                    _chart_fields(chart), max_charts=MAX_CHARTS)
    if row is None:
        raise not_found("no dashboard with that id")
    if row == "full":
        raise ApiError(409, "dashboard_full", f"a dashboard holds at most {MAX_CHARTS} charts")
    return json_response(chart_json(row), 201)


async def _own_chart(request: web.Request, conn):
    key = key_of(request)
    row = await store.get_chart(conn, key.workspace_id, key.env, _dash(request),
                                _chart(request))
    if row is None:
        raise not_found("no chart with that id on that dashboard")
    return row


@requires(CHANGE_SCOPES, "query")
async def patch_chart(request: web.Request) -> web.Response:
    key = key_of(request)
    patch = _decode(await read_body(request, BODY_LIMIT), ChartPatch)
    async with request.config_dict[POOL].acquire() as conn:
        current = await _own_chart(request, conn)
        merged = {k: current[k] for k in ("title", "type", "event", "filters", "group_by", "steps")}
        merged.update(msgspec.to_builtins(patch))  # UNSET fields are left out
        # Leaving a funnel drops its steps, unless the patch sets them (then validation speaks).
        if merged["type"] != "funnel" and patch.steps is UNSET:
            merged["steps"] = None
        try:
            chart = msgspec.convert(merged, ChartIn)
        except msgspec.ValidationError as exc:
            raise _problem(exc) from None
        row = await store.update_chart(conn, key.workspace_id, key.env, current["dashboard_id"], current["id"],
                                       _chart_fields(chart))
    if row is None:
        raise not_found("no chart with that id on that dashboard")
    return json_response(chart_json(row))


@requires("write", "query")
async def delete_chart(request: web.Request) -> web.Response:
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        deleted = await store.delete_chart(conn, key.workspace_id, key.env, _dash(request),
                                           _chart(request))
    if not deleted:
        raise not_found("no chart with that id on that dashboard")
    return web.Response(status=204)


@requires("read", "query")
async def chart_data_view(request: web.Request) -> web.Response:
    key = key_of(request)
    start, end, interval = data_range(request)
    async with request.config_dict[POOL].acquire() as conn:
        chart = await _own_chart(request, conn)
    db = await analytics_store(request, key.workspace_id)
    body = await chart_data_json(db, key.workspace_id, key.env, chart, start, end, interval)
    return json_response(body)


@requires(CHANGE_SCOPES, "query")
async def share(request: web.Request) -> web.Response:
    """Make the dashboard public; sharing a shared dashboard keeps its URL."""
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.set_public(conn, key.workspace_id, key.env, _dash(request),
                                     secrets.token_urlsafe(24))
        if row is None:
            raise not_found("no dashboard with that id")
        return await _full(request, conn, row)


@requires("write", "query")
async def unshare(request: web.Request) -> web.Response:
    """Make the dashboard private; its public URL stops working at once."""
    key = key_of(request)
    async with request.config_dict[POOL].acquire() as conn:
        if await store.set_public(conn, key.workspace_id, key.env, _dash(request), None) is None:
            raise not_found("no dashboard with that id")
    return web.Response(status=204)


def setup_dashboard_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/dashboards", list_dashboards)
    router.add_post("/dashboards", create_dashboard)
    router.add_get("/dashboards/{id}", get_dashboard)
    router.add_patch("/dashboards/{id}", patch_dashboard)
    router.add_delete("/dashboards/{id}", delete_dashboard)
    router.add_post("/dashboards/{id}/charts", add_chart)
    router.add_patch("/dashboards/{id}/charts/{chart_id}", patch_chart)
    router.add_delete("/dashboards/{id}/charts/{chart_id}", delete_chart)
    router.add_get("/dashboards/{id}/charts/{chart_id}/data", chart_data_view)
    router.add_post("/dashboards/{id}/share", share)
    router.add_delete("/dashboards/{id}/share", unshare)
