"""Query parameters of GET /api/analytics/*: site access, the range window, intervals and filters.

A range covers the N most recent buckets of its granularity, the current (partial) one included:
1h = 60 minutes, 24h = 24 hours, 7d = 168 hours, 30d = 30 days, 90d = 90 days, in the site's time zone
(a day from one local midnight to the next). Windows therefore start on a bucket boundary, so the totals
equal the sum of the time-series points. Beyond the spec, as Plausible's periods: `today`, `yesterday`,
`month` (this month so far), `last_month`, `year` (this year so far), `12mo` (this month and the 11 before it)
and `all` (since the site's first day) are the site's calendar days, and
`range=custom&from=YYYY-MM-DD&to=YYYY-MM-DD` its days from `from` to `to`, both included (by the hour when
they are one day, else by the day).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import asyncpg
from aiohttp import hdrs, web

from app.appkeys import ANALYTICS, MIRROR, POOL, SETTINGS
from app.input_rules import query_int, storable_text
from app.outages import MirrorBehind, store_caught_up
from app.responses import SiteError
from app.schemas import EARLIEST
from app.shared_access import check_site, reader
from storage import analytics as store
from storage import sites as site_store
from storage.clickhouse import AnalyticsStore
from storage.read_slots import reads_for
from storage.site_filters import DIMENSIONS, PROPS_PREFIX, Filter

UNITS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
RANGES = {"1h": (60, "minute"), "24h": (24, "hour"), "7d": (168, "hour"), "30d": (30, "day"), "90d": (90, "day")}
MAX_POINTS = 2200  # 90d by hour (2160) fits; 7d by minute (10,080) does not
CUSTOM = "custom"
ALL = "all"
# The site's calendar: the days by the hour, the longer periods by the day.
PERIODS = ("today", "yesterday", "month", "last_month", "year", "12mo", ALL)
BY_THE_HOUR = ("today", "yesterday")
# A custom range's days: none before the events can be (app.schemas.EARLIEST), and at most MAX_POINTS of them
# (its series is by the day).
FIRST_DAY, LAST_DAY = EARLIEST.date(), date(2099, 12, 31)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}\Z")


def truncate(moment: datetime, unit: str, time_zone: str = "UTC") -> datetime:
    """The start of the bucket holding `moment`, in UTC: a minute, or an hour or a day of the time zone."""
    local = moment.astimezone(ZoneInfo(time_zone))
    if unit == "minute":
        local = local.replace(second=0, microsecond=0)
    elif unit == "hour":
        local = local.replace(minute=0, second=0, microsecond=0)
    else:
        local = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return local.astimezone(UTC)


def days_later(moment: datetime, days: int, time_zone: str) -> datetime:
    """The same local time `days` calendar days later (earlier when negative): across a daylight-saving
    change that is an hour more or less than `days` times 24 hours."""
    zone = ZoneInfo(time_zone)
    local = moment.astimezone(zone).replace(tzinfo=None) + timedelta(days=days)
    return local.replace(tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Window:
    range: str
    start: datetime  # inclusive, on a bucket boundary
    end: datetime  # exclusive: the end of the current bucket
    unit: str  # the range's own bucket
    time_zone: str = "UTC"  # the site's: its buckets' zone
    days: tuple[date, date] | None = None  # the first and last day of a calendar period or a custom range

    def buckets(self, interval: str) -> tuple[datetime, datetime]:
        """First and last bucket start of a series over this window."""
        return (truncate(self.start, interval, self.time_zone),
                truncate(self.end - timedelta(microseconds=1), interval, self.time_zone))


def window_for(range_name: str, now: datetime | None = None, time_zone: str = "UTC",
               since: date | None = None) -> Window:
    """The window of a named range, or of a calendar period, as of `now` in the time zone; `all` begins on the
    site's first day, `since` (first_day)."""
    if range_name in PERIODS:
        today = local_today(time_zone, now)
        first, last = period_days(range_name, today, since)
        return days_window(range_name, first, last, time_zone, "hour" if range_name in BY_THE_HOUR else "day")
    count, unit = RANGES[range_name]
    current = truncate(now or datetime.now(UTC), unit, time_zone)
    if unit == "day":  # calendar days of the zone
        return Window(range_name, days_later(current, 1 - count, time_zone), days_later(current, 1, time_zone),
                      unit, time_zone)
    step = UNITS[unit]
    return Window(range_name, current - (count - 1) * step, current + step, unit, time_zone)


def local_today(time_zone: str, now: datetime | None = None) -> date:
    """The day it is (at `now`) in the time zone."""
    return (now or datetime.now(UTC)).astimezone(ZoneInfo(time_zone)).date()


def month_start(day: date, back: int) -> date:
    """The first day of the month `back` months before `day`'s (after it, when negative)."""
    months = day.year * 12 + day.month - 1 - back
    return date(months // 12, months % 12 + 1, 1)


def period_days(name: str, today: date, since: date | None = None) -> tuple[date, date]:
    """The first and last day of a calendar period, seen on the site's `today`; all time's from `since` (today
    when unknown), but no earlier than a series of days reaches (MAX_POINTS)."""
    if name == "today":
        return today, today
    if name == "yesterday":
        return today - timedelta(days=1), today - timedelta(days=1)
    if name == "month":
        return today.replace(day=1), today
    if name == "year":
        return today.replace(month=1, day=1), today
    if name == "12mo":  # as Plausible's: this month and the 11 before it
        return month_start(today, 11), today
    if name == ALL:
        return max(min(since or today, today), today - timedelta(days=MAX_POINTS - 1)), today
    last = today.replace(day=1) - timedelta(days=1)  # last_month
    return last.replace(day=1), last


def days_window(name: str, first: date, last: date, time_zone: str, unit: str) -> Window:
    """The site's days from `first` to `last`, both included."""
    return Window(name, midnight(first, time_zone), midnight(last + timedelta(days=1), time_zone), unit, time_zone,
                  (first, last))


def midnight(day: date, time_zone: str) -> datetime:
    """The instant the zone's `day` begins."""
    return datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(time_zone)).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class RangeAsked:
    name: str
    days: tuple[date, date] | None = None  # range=custom: its first and last day


def window_of(asked: RangeAsked, time_zone: str = "UTC", now: datetime | None = None,
              since: date | None = None) -> Window:
    """The window of a named range up to now, or of a custom range's days, in the site's time zone."""
    if asked.days is None:
        return window_for(asked.name, now, time_zone, since)
    first, last = asked.days
    return days_window(CUSTOM, first, last, time_zone, "hour" if first == last else "day")


@dataclass(frozen=True, slots=True)
class Site:
    id: str
    domain: str
    time_zone: str = "UTC"


@dataclass(frozen=True, slots=True)
class BaseQuery:
    workspace_id: int
    site_id: str
    window: Window  # in the site's time zone
    site: Site | None  # None: not a site of the caller's workspace


async def base_params(request: web.Request) -> BaseQuery:
    """Session (401) or shared link (404, app/shared_access.py), then siteId and range (400), and the site,
    whose time zone places the range's window. That the site exists is checked by resolve_site, once every
    other parameter has been validated."""
    who = await reader(request)
    bad = next((name for name, value in request.query.items() if not storable_text(value)), None)
    if bad is not None:  # PostgreSQL text cannot hold it (app/input_rules.py)
        raise SiteError(400, f"invalid {bad}")
    site_id = request.query.get("siteId", "").strip()
    if not site_id:
        raise SiteError(400, "missing siteId")
    asked = range_param(request)
    check_site(who, site_id)
    async with request.config_dict[POOL].acquire() as conn:
        row = await store.site_in_workspace(conn, site_id, who.workspace_id)
        zone = "UTC" if row is None else row["time_zone"]
        since = await first_day(conn, site_id, zone) if row is not None and asked.name == ALL else None
    site = None if row is None else Site(row["id"], row["domain"], zone)
    return BaseQuery(who.workspace_id, site_id, window_of(asked, zone, since=since), site)


async def first_day(conn: asyncpg.Connection, site_id: str, time_zone: str) -> date | None:
    """The site's first day in its zone, where all time begins: the day of its first event, or the day it was
    made when that is earlier (no events yet)."""
    first = await site_store.first_moment(conn, site_id)
    return None if first is None else first.astimezone(ZoneInfo(time_zone)).date()


async def resolve_site(request: web.Request, query: BaseQuery) -> Site:
    """The site, which must belong to the caller's workspace; anything else is a 404."""
    if query.site is None:
        raise SiteError(404, "not found")
    return query.site


async def caught_up(request: web.Request) -> bool:
    """Whether the mirror brought the store up to date with every event committed before this call within the
    report timeout (a backlog after an upgrade, a rebuild or an outage takes longer); it goes on regardless.
    A store that refuses the catch-up is behind too (app.outages.store_caught_up)."""
    try:
        async with asyncio.timeout(request.config_dict[SETTINGS].report_timeout_seconds):
            return await store_caught_up(request.config_dict[MIRROR].catch_up)
    except TimeoutError:
        return False


class _HeadAnswered(web.HTTPOk):
    """A HEAD's answer once GET's checks passed (aiohttp's 2xx exceptions carry a text body otherwise)."""

    empty_body = True


async def analytics_store(request: web.Request, workspace_id: int) -> AnalyticsStore:
    """The store, brought up to date with every event committed before this read began (one indexed probe
    of the outbox when the mirror has nothing pending); MirrorBehind, a 503 in each API's shape, when that
    takes longer than the report timeout. The request's reads are the workspace's (storage/read_slots.py).

    Each handler takes the store after its checks and before its first read, so a HEAD, which aiohttp routes to
    the GET handler, is answered here: GET's status and JSON type without a body, reading nothing (a probe
    cost a whole dashboard's reads otherwise)."""
    if request.method == hdrs.METH_HEAD:
        raise _HeadAnswered(content_type="application/json")
    reads_for(workspace_id)
    if not await caught_up(request):
        raise MirrorBehind()
    return request.config_dict[ANALYTICS]


def range_param(request: web.Request) -> RangeAsked:
    name = request.query.get("range") or "7d"
    if name == CUSTOM:
        first, last = _day_param(request, "from"), _day_param(request, "to")
        if first > last:
            raise SiteError(400, "invalid range", detail="from is after to")
        if (last - first).days >= MAX_POINTS:
            raise SiteError(400, "invalid range", detail=f"at most {MAX_POINTS} days")
        return RangeAsked(name, (first, last))
    if name not in RANGES and name not in PERIODS:
        raise SiteError(400, "invalid range", allowed=[*RANGES, *PERIODS, CUSTOM])
    return RangeAsked(name)


def _day_param(request: web.Request, key: str) -> date:
    """A custom range's day: YYYY-MM-DD, a day of the site's calendar."""
    raw = request.query.get(key) or ""
    try:
        day = date.fromisoformat(raw) if _DAY.match(raw) else None
    except ValueError:
        day = None
    if day is None or not FIRST_DAY <= day <= LAST_DAY:
        raise SiteError(400, f"invalid {key}", detail="a day, YYYY-MM-DD, with range=custom")
    return day


def interval_param(request: web.Request, window: Window) -> str:
    """Default: the range's own bucket (hour for 24h and 7d, as the spec's 'default hour')."""
    interval = request.query.get("interval") or window.unit
    if interval not in UNITS:
        raise SiteError(400, "invalid interval", allowed=list(UNITS))
    first, last = window.buckets(interval)
    if (last - first) / UNITS[interval] + 1 > MAX_POINTS:
        raise SiteError(400, "interval too fine for range", maxPoints=MAX_POINTS)
    return interval


def count_param(request: web.Request, name: str, default: int, cap: int) -> int:
    """A positive integer; values above the cap are clamped to it (the response echoes it)."""
    try:
        return query_int(request.query.get(name), default, 1, cap, clamp=True)
    except ValueError:
        raise SiteError(400, f"invalid {name}") from None


def offset_param(request: web.Request) -> int:
    try:
        return query_int(request.query.get("offset"), 0, 0)
    except ValueError:
        raise SiteError(400, "invalid offset") from None


def filter_terms(request: web.Request) -> tuple[Filter, ...]:
    """Repeated `filter=dimension<op>value` parameters, op one of == (is), != (is not), ~= (contains)."""
    out = []
    for raw in request.query.getall("filter", []):
        found = min(((raw.find(op), op) for op in ("==", "!=", "~=") if raw.find(op) > 0), default=None)
        if found is None:
            raise SiteError(400, "invalid filter", filter=raw, syntax="dimension==value, != or ~=")
        at, op = found
        # A custom property's key is whatever the tracker sent, so `props:<key>` keeps its key as written
        # ("plan " is not "plan"); the fixed dimension names may have spaces around them.
        dimension, value = raw[:at].lstrip(), raw[at + 2:]
        if not dimension.startswith(PROPS_PREFIX):
            dimension = dimension.rstrip()
        known = dimension in DIMENSIONS or (dimension.startswith(PROPS_PREFIX) and len(dimension) > len(PROPS_PREFIX))
        if not known or value == "":
            raise SiteError(400, "invalid filter", filter=raw, dimensions=[*DIMENSIONS, "props:<key>"])
        if dimension == "goal" and op == "~=":
            raise SiteError(400, "invalid filter", filter=raw, detail="goal filters take == or !=")
        if dimension == "country":  # stored upper-case; taken in any case, as the spec's country parameter
            value = value.upper()
        out.append(Filter(dimension, op, value))  # type: ignore[arg-type]
    return tuple(out)


def filters_param(request: web.Request) -> store.Filters:
    q = request.query
    return store.Filters(
        name=q.get("eventName") or None,
        path=q.get("path") or None,
        referrer=q.get("referrer") or None,
        country=(q.get("country") or "").upper() or None,
        extra=filter_terms(request),
    )


async def with_goals(request: web.Request, site: Site, filters: store.Filters,
                     needed: bool = False) -> tuple[store.Filters, list[store.Goal]]:
    """The site's goals, read when a filter (or the caller) names them."""
    if not needed and not any(f.dimension == "goal" for f in filters.extra):
        return filters, []
    async with request.config_dict[POOL].acquire() as conn:
        goals = await store.site_goals(conn, site.id)
    return dataclasses.replace(filters, goals=tuple(goals)), goals


async def site_and_filters(request: web.Request, query: BaseQuery) -> tuple[Site, store.Filters]:
    """The filters (400 when invalid), then the site (404), then the goals the filters name: a read's last
    parameter steps, once its own parameters are checked."""
    filters = filters_param(request)
    site = await resolve_site(request, query)
    filters, _ = await with_goals(request, site, filters)
    return site, filters


@contextmanager
def filter_errors() -> Iterator[None]:
    """A filter the engine cannot apply (store.UnsupportedFilter) is the caller's 400."""
    try:
        yield
    except store.UnsupportedFilter as exc:
        raise SiteError(400, str(exc)) from None
