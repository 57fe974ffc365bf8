"""Day rows of the analytics store for unfiltered reads: the event counts of ended days (site_day_counts,
per event name and per page, referrer host, country and hour), the statistics of the visits that started on
them, and the visitor sets of days (site_days). The visitor states of a window's ended days, cached whole and
per value, are storage/analytics_windows.py's, which reads its days' inserts with this module's row kinds.

Counts cannot come from a view: a mirror batch written twice would count twice. They are computed here,
from site_events read with FINAL, by the first read that needs a day once the day has ended and its last
insert has settled, and used while no insert has touched the day since (storage/clickhouse_schema.py,
COUNTS_TABLE). A day's visit statistics also depend on the day before (did the visit start then?) and the
day after (where did it end?): they are used while no insert has touched any of the three, and computed
once the day after has ended too. A read takes the days it may use from here and the rest of its window
from the events and the session rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from storage.clickhouse import AnalyticsStore, Params

TS = "DateTime64(6, 'UTC')"
MARKER = 255  # the row that completes a computation of one day
# Written beside the marker by computations that hold the visits (computations made before the visits
# were kept lack it: their days' visits are read live until computed again).
VISITS_MARKER = 254
# Written beside it by computations that hold the hourly counts (dim HOURS); days counted before those were
# kept are counted again once.
HOURS_MARKER = 253
# Written beside it by computations whose visit rows are per start hour (VISITS); days counted before are
# counted again once too.
VISIT_HOURS_MARKER = 252  # the lowest marker: counted rows have dims below it
MARKERS = f"{MARKER}, {VISITS_MARKER}, {HOURS_MARKER}, {VISIT_HOURS_MARKER}"  # every computation writes them all
# counted_days's other row kinds, below every marker.
WRITTEN, CLOCK, WINDOWS, TAIL = 0, 1, 2, 3
# The counted keys: dim -> site_events column (TOTAL: the name's total; HOURS: its count per UTC hour, key the
# hour).
PAGES = 0
TOTAL = 3
HOURS = 5
_KEYS = {PAGES: "toString(page)", 1: "referrer_host", 2: "toString(country)", TOTAL: "''",
         HOURS: "toString(toHour(ts))"}
# The day rows of a daily or hourly series: their dim, and the start of each row's bucket as a unix time.
SERIES_ROWS = {"day": (TOTAL, "toUnixTimestamp(toDateTime(day, 'UTC'))"),
               "hour": (HOURS, "toUnixTimestamp(toDateTime(day, 'UTC')) + toUInt32OrZero(key) * 3600")}
# The visits that started on the day (of the rows of the day before to the day after): how many, how many
# had exactly one pageview, and their summed duration in microseconds (key 'visits', 'bounces',
# 'duration_us'), per UTC hour they started in (name; '' in computations from before VISIT_HOURS_MARKER).
VISITS = 4
_ONE_DAY = timedelta(days=1)


def whole_days(start: datetime, end: datetime) -> list[date]:
    """The UTC days lying entirely in [start, end)."""
    first = start.astimezone(UTC).date()
    if datetime.combine(first, time(), UTC) < start:
        first += timedelta(days=1)
    last = end.astimezone(UTC).date()  # exclusive: [last 00:00, end) is not whole
    return [first + timedelta(days=i) for i in range((last - first).days)]


def window_days(start: datetime, end: datetime) -> list[date]:
    """The UTC days [start, end) touches, partial ones included."""
    first, last = start.astimezone(UTC).date(), (end.astimezone(UTC) - timedelta(microseconds=1)).date()
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


@dataclass(frozen=True, slots=True)
class CountedDays:
    counts: list[date]  # whole days of the window whose event counts are up to date
    visits: list[date]  # whole days of the window whose visit statistics are up to date
    hours: list[date] = field(default_factory=list)  # those of the counted days that hold hourly counts
    written: dict[date, datetime] = field(default_factory=dict)  # the last insert into each day, around them
    now: datetime | None = None  # the store's clock when they were read
    computed: dict[date, datetime] = field(default_factory=dict)  # the computation used, per counted day
    # The ended day the window starts inside, at an hour (7 days by the hour), when its counts and visits
    # are up to date: its hours from the window's start on come from its hourly rows. Not in the lists above.
    partial: date | None = None
    # The latest cached visitor state per (first, last) day, of those read with them: site_window_visitors's
    # (counted_days), or the complete per-key states of site_window_keys under one dim
    # (analytics_windows.written_days).
    windows: dict[tuple[date, date], datetime] = field(default_factory=dict)
    # The window ends inside a day none of whose events is at or after its end (a window that ends now): the
    # day's session rows and visitor set hold only events of the window.
    tail_ended: bool = False

    def for_series(self, interval: str) -> list[date]:
        """The counted days whose rows hold a series by `interval` (SERIES_ROWS; none for other intervals)."""
        return {"day": self.counts, "hour": self.hours}.get(interval, [])


NONE = CountedDays([], [])


async def counted_days(store: AnalyticsStore, site_id: str, start: datetime, end: datetime) -> CountedDays:
    """The whole days of the window whose counts (and visit statistics) site_day_counts holds up to date,
    and the day the window starts inside (`partial`) if so, after computing those of the ended, settled days
    that lack them. Days without events are left out (the events have none)."""
    days = whole_days(start, end)
    if not days:
        return NONE
    moment = start.astimezone(UTC)
    head = moment.date() if moment.time() != time() and moment == moment.replace(minute=0, second=0,
                                                                                  microsecond=0) else None
    candidates = [head, *days] if head else days
    q = Params()
    site = q.bind(site_id)
    lo, hi = q.bind(candidates[0] - _ONE_DAY, "Date"), q.bind(days[-1] + _ONE_DAY, "Date")
    # Row kinds in one union (a join of the two tables cost ~6 ms more, and analytics_windows.visitor_states's
    # own look for its window state another query): each day's last insert (kind WRITTEN), each marker's
    # latest computation per day (kind: the marker), the latest cached visitor state of the window's days from
    # its first whole day to each last (kind WINDOWS), the last event of the day the window ends inside (kind
    # TAIL), and the store's clock.
    last_event = _end_day_last_event(q, store, site_id, end)
    tail = f"UNION ALL SELECT {TAIL}, today(), {last_event} " if last_event else ""
    rows = await store.query(
        f"SELECT {WRITTEN}, day, max(written) FROM {store.table('site_days')} WHERE site_id = {site} "
        f"AND day >= {lo} AND day <= {hi} GROUP BY day UNION ALL SELECT dim, day, max(computed) FROM "
        f"{store.table('site_day_counts')} WHERE site_id = {site} AND day >= {lo} AND day <= {hi} "
        f"AND dim IN ({MARKERS}) GROUP BY dim, day "
        f"UNION ALL SELECT {WINDOWS}, last, max(computed) FROM {store.table('site_window_visitors')} "
        f"WHERE site_id = {site} AND first = {q.bind(days[0], 'Date')} GROUP BY last {tail}"
        f"UNION ALL SELECT {CLOCK}, today(), now64(6, 'UTC')", q.params)
    settle = timedelta(seconds=store.settle_seconds)
    written = {day: at for kind, day, at in rows if kind == WRITTEN}
    marks = {(kind, day): at for kind, day, at in rows if kind >= VISIT_HOURS_MARKER}
    windows = {last: at for kind, last, at in rows if kind == WINDOWS}
    tail_ended = any(kind == TAIL and as_utc(at) < end for kind, _, at in rows)
    now = next(at for kind, _, at in rows if kind == CLOCK)
    never = datetime.min.replace(tzinfo=now.tzinfo)  # a marker not written (as aware as the store's values)
    computed = {day: marks.get((MARKER, day), never) for day in written}
    with_visits = {day for day in written if marks.get((VISITS_MARKER, day), never) == computed[day]}
    # the hourly counts and the visits per start hour
    with_hours = {day for day in written if marks.get((HOURS_MARKER, day), never) == computed[day]
                  == marks.get((VISIT_HOURS_MARKER, day), never)}

    def last_write_around(day: date) -> datetime:
        return max(written[d] for d in (day - _ONE_DAY, day, day + _ONE_DAY) if d in written)

    fresh, stale, visits, hours = [], [], [], []
    for day in candidates:
        if day not in written:
            continue
        if computed[day] > written[day] + settle:
            fresh.append(day)
            if day in with_visits and computed[day] > last_write_around(day) + settle:
                visits.append(day)
            elif day + _ONE_DAY < now.date() and last_write_around(day) + settle < now:
                stale.append(day)  # counted, but its visits changed since and have settled: computed again
            if day in with_hours:
                hours.append(day)
            elif day not in stale:
                stale.append(day)  # counted before the hourly rows were kept
        elif day < now.date() and written[day] + settle < now:
            stale.append(day)
    used = {day: computed[day] for day in fresh}
    if stale:
        # Reads sent at once (the dashboard's) share one computation when they saw the same inserts.
        seen = max(last_write_around(d) for d in stale)
        used |= await store.once(("day counts", site_id, tuple(stale), seen),
                                 lambda: _count_uncounted(store, site_id, stale, seen))
        fresh = sorted(set(fresh) | set(stale))
        visits = sorted(set(visits) | {d for d in stale if last_write_around(d) + settle < now})
        hours = sorted(set(hours) | set(stale))
    partial = head if head in visits and head in hours else None
    return CountedDays([d for d in fresh if d != head], [d for d in visits if d != head],
                       [d for d in hours if d != head], written, now, used, partial,
                       {(days[0], last): at for last, at in windows.items()}, tail_ended)


def _end_day_last_event(q: Params, store: AnalyticsStore, site_id: str, end: datetime) -> str | None:
    """A scalar subquery: the time of the last event of the day `end` falls inside (1970 when it has none), of
    every event, those without a session too (the day's visitor set holds them). None when `end` is a midnight:
    there is no such day."""
    if end.astimezone(UTC).time() == time():
        return None
    return (f"(SELECT max(ts) FROM {store.table('site_events')} WHERE site_id = {q.bind(site_id)} "
            f"AND toDate(ts) = {q.bind(end.astimezone(UTC).date(), 'Date')})")


def tail_ended_sql(q: Params, store: AnalyticsStore, site_id: str, end: datetime) -> str:
    """CountedDays.tail_ended as a scalar expression, for a read that looks up no counted days (the filtered
    overview's totals): no event of the day `end` falls inside is at or after `end` (0 when `end` is a
    midnight)."""
    last_event = _end_day_last_event(q, store, site_id, end)
    return f"{last_event} < {q.bind(end, TS)}" if last_event else "0"


async def _count_uncounted(store: AnalyticsStore, site_id: str, days: list[date],
                           seen: datetime) -> dict[date, datetime]:
    """The computation of each of `days` made after `seen` (their last insert) and its settle time, counting
    those that have none. A read that looked before another's computation ended may ask only after it has
    ended, when once() no longer shares it: it finds that computation (every marker of it) here instead of
    counting again."""
    q = Params()
    since = q.bind(as_utc(seen) + timedelta(seconds=store.settle_seconds), TS)
    rows = await store.query(
        f"SELECT day, max(computed) FROM (SELECT day, computed FROM {store.table('site_day_counts')} WHERE "
        f"site_id = {q.bind(site_id)} AND day IN {q.bind(days, 'Array(Date)')} AND dim IN ({MARKERS}) "
        f"AND computed > {since} GROUP BY day, computed HAVING uniqExact(dim) = length([{MARKERS}])) GROUP BY day",
        q.params)
    made = {day: as_utc(at) for day, at in rows}
    if uncounted := [d for d in days if d not in made]:
        made |= dict.fromkeys(uncounted, await _compute(store, site_id, uncounted))
    return made


async def _compute(store: AnalyticsStore, site_id: str, days: list[date]) -> datetime:
    """Count the days from the events (FINAL) and their visits from the session rows, stamped with one
    server time read after every insert the days (and their neighbours) hold, then write the marker that
    makes the computation complete. Returns the stamp."""
    at = await store_now(store)
    q = Params()
    site, stamp, chosen = q.bind(site_id), q.bind(at, TS), q.bind(days, "Array(Date)")
    table = store.table("site_events")
    parts = [f"SELECT toDate(ts) AS day, name, {dim} AS dim, {key} AS key, count() AS c FROM {table} FINAL "
             f"WHERE site_id = {site} AND toDate(ts) IN {chosen} GROUP BY day, name, key" for dim, key in _KEYS.items()]
    around = q.bind(sorted({d + i * _ONE_DAY for d in days for i in (-1, 0, 1)}), "Array(Date)")
    parts.append(
        f"SELECT d AS day, toString(h) AS name, {VISITS} AS dim, v.1 AS key, v.2 AS c FROM (SELECT toDate(f) AS d, "
        "toHour(f) AS h, count() AS n, countIf(pf = pl) AS b, toUInt64(sum(dateDiff('microsecond', f, l))) AS us "
        f"FROM (SELECT session, min(first) AS f, max(last) AS l, min(pv_min) AS pf, max(pv_max) AS pl FROM "
        f"{store.table('site_sessions')} WHERE site_id = {site} AND day IN {around} GROUP BY session "
        f"HAVING toDate(f) IN {chosen}) GROUP BY d, h) "
        "ARRAY JOIN [('visits', n), ('bounces', b), ('duration_us', us)] AS v")
    counts = store.table("site_day_counts")
    # Through a Distributed table the rows must be on the shard before the marker is: inserts there are
    # synchronous (the store's cluster settings).
    await store.command(f"INSERT INTO {counts} (site_id, day, computed, name, dim, key, c) "
                        f"SELECT {site}, day, {stamp}, name, dim, key, c FROM ({' UNION ALL '.join(parts)})", q.params)
    q = Params()
    await store.command(f"INSERT INTO {counts} (site_id, day, computed, name, dim, key, c) SELECT {q.bind(site_id)}, "
                        f"arrayJoin({q.bind(days, 'Array(Date)')}), {q.bind(at, TS)}, '', "
                        f"arrayJoin([{MARKERS}]), '', 0",
                        q.params)
    return at


def as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # clickhouse-connect may hand it back naive


async def store_now(store: AnalyticsStore) -> datetime:
    """The store's clock, which `written` is stamped by."""
    return as_utc((await store.query("SELECT now64(6, 'UTC')"))[0][0])


def counts_of(q: Params, store: AnalyticsStore, site_id: str, counted: CountedDays, days: list[date]) -> str:
    """A subquery of the rows (day, name, dim, key, c) of `days` (counted ones), of the computation
    counted_days chose for each (named here: looking it up again in the query cost 5 ms each time)."""
    chosen = q.bind(days, "Array(Date)")
    stamps = q.bind([counted.computed[d] for d in days], f"Array({TS})")
    return (f"(SELECT day, name, dim, key, c FROM {store.table('site_day_counts')} WHERE site_id = {q.bind(site_id)} "
            f"AND day IN {chosen} AND computed = arrayElement({stamps}, indexOf({chosen}, day)) "
            f"AND dim < {VISIT_HOURS_MARKER})")


def series_rows(q: Params, counted: CountedDays, interval: str, time_zone: str, start: datetime,
                end: datetime) -> tuple[list[date], int, str]:
    """The counted days whose rows hold a series by `interval` in the site's time zone, the rows' dim and the
    start of each row's bucket as a unix time ([] when none). In UTC, SERIES_ROWS. In a zone whose offsets
    are whole hours all through the window (not India's), each UTC hour's count lies in one of the zone's
    hours and days, so the hourly rows are put in those (the 30-day overview of a site in New York read every
    event of its series otherwise)."""
    if time_zone == "UTC":
        dim, bucket = SERIES_ROWS.get(interval, (TOTAL, ""))
        return counted.for_series(interval), dim, bucket
    if interval not in SERIES_ROWS or not _whole_hours(time_zone, start, end):
        return [], HOURS, ""
    if interval == "hour":  # the zone's hours are UTC ones
        return counted.hours, *SERIES_ROWS["hour"]
    hour = "toDateTime(day, 'UTC') + toUInt32OrZero(key) * 3600"  # the row's UTC hour
    return counted.hours, HOURS, f"toUnixTimestamp(toStartOfDay({hour}, {q.bind(time_zone)}))"


def _whole_hours(time_zone: str, start: datetime, end: datetime) -> bool:
    """Whether the zone's offset from UTC is a whole number of hours at the window's ends and each UTC
    midnight between (a change of summer time happens at most once a day)."""
    zone, at = ZoneInfo(time_zone), start
    while True:
        offset = at.astimezone(zone).utcoffset()
        if offset is None or offset.total_seconds() % 3600:
            return False
        if at >= end:
            return True
        at = min(end, datetime.combine(at.astimezone(UTC).date() + _ONE_DAY, time(), UTC))


def other_days(q: Params, start: datetime, end: datetime, days: list[date]) -> str:
    """The condition on site_events rows of the window that leaves out `days` ('' when none), stated as the
    days left, which the sorting key's day selects (NOT IN selects no granule: at 10M events, each read of
    the day left scanned a third of the table)."""
    if not days:
        return ""
    excluded = set(days)
    left = [d for d in window_days(start, end) if d not in excluded]
    return f" AND toDate(ts) IN {q.bind(left, 'Array(Date)')}" if left else " AND 0"
