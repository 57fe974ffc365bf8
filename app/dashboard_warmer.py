"""Shortly after each UTC midnight, makes the rows that the day's first dashboard reads would otherwise make
themselves (storage/analytics_days.py, analytics_windows.py): the ended day's counts and the windows'
visitors for the overviews, and the per-value visitor states of the panels and goals that were read the day
before. Without it, the first opening of a range each day pays for them: at 10M events and 30 days, 2.6 s
instead of 0.3 to 0.6.

Only unfiltered reads are remembered (site, range, and the breakdown's property or "" for the overview),
at most `MAX_READS` of them, each for two days after it was last asked for. Each process notes the reads it
serves in memory and stores them in PostgreSQL (storage/dashboard_reads.py) on its next tick and when it
stops, so a restart loses at most a tick's new reads; the first process to claim a day warms every
process's reads.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import asyncpg

from actors.analytics_mirror import Mirror
from app.views.analytics_params import ALL, CUSTOM, first_day, window_for
from storage import analytics as store
from storage import analytics_breakdown, analytics_days, analytics_overview, dashboard_reads
from storage import sites as site_store
from storage.clickhouse import AnalyticsStore

log = logging.getLogger("tally.warmer")

MAX_READS = 10_000
KEEP = timedelta(days=2)
# How long after midnight the day's rows are made: the last events of the day have reached the store (the
# mirror lags ~1 s) and its settle time has passed.
AFTER_MIDNIGHT = timedelta(minutes=1)
# How long a night's warming may run: up to MAX_READS reads of a second or more each would otherwise keep the
# store busy for hours. Reads are made most recently asked first; those left make their rows on first read.
BUDGET = timedelta(minutes=20)
OVERVIEW = ""


class DashboardWarmer:
    def __init__(self, analytics: AnalyticsStore, pool: asyncpg.Pool, mirror: Mirror) -> None:
        self.analytics = analytics
        self.pool = pool
        self.mirror = mirror
        # (site, range, property) -> [the day last asked, whether PostgreSQL has that day]
        self._reads: dict[tuple[str, str, str], list] = {}
        self.warmed = datetime.now(UTC).date()  # today's rows are made by today's reads
        self.budget = BUDGET

    def seen(self, site_id: str, range_name: str, prop: str = OVERVIEW) -> None:
        """An unfiltered read of the overview (prop "") or of a visitors breakdown by `prop`. A custom range's
        days are its reader's choice, not a read the next day repeats: not remembered."""
        if range_name == CUSTOM:
            return
        key, today = (site_id, range_name, prop), datetime.now(UTC).date()
        noted = self._reads.get(key)
        if noted is not None and noted[0] == today:
            return  # every read of a dashboard's opening after its first: nothing new to store
        if noted is None and len(self._reads) >= MAX_READS:
            del self._reads[next(iter(self._reads))]  # the longest unasked
        self._reads.pop(key, None)
        self._reads[key] = [today, False]

    @property
    def remembered(self) -> list[tuple[str, str, str]]:
        """The reads this process served lately: (site, range, property or "")."""
        return list(self._reads)

    async def save(self) -> None:
        """Store the reads noted since the last save (failing, they are tried again next time)."""
        unsaved = [(*key, noted[0]) for key, noted in self._reads.items() if not noted[1]]
        if not unsaved:
            return
        async with self.pool.acquire() as conn:
            await dashboard_reads.remember(conn, unsaved)
        for site_id, range_name, prop, day in unsaved:
            noted = self._reads.get((site_id, range_name, prop))
            if noted is not None and noted[0] == day:
                noted[1] = True

    async def warm(self, now: datetime | None = None) -> int:
        """Store the reads noted since the last tick; once a day, after midnight, the process that claims the
        day makes the rows of the stored reads, as many as its budget allows (at least one). Returns how many
        reads it warmed."""
        now = now or datetime.now(UTC)
        await self.save()
        settle = timedelta(seconds=self.analytics.settle_seconds)
        if now.date() == self.warmed or now - now.replace(hour=0, minute=0, second=0, microsecond=0) < \
                AFTER_MIDNIGHT + settle:
            return 0
        self._reads = {k: noted for k, noted in self._reads.items() if noted[0] >= now.date() - KEEP}
        await self.mirror.catch_up()  # failing (PostgreSQL away), the next tick tries again
        async with self.pool.acquire() as conn:
            claimed = await dashboard_reads.claim_day(conn, now.date())
            reads = await dashboard_reads.recent(conn, now.date() - KEEP, MAX_READS) if claimed else []
        self.warmed = now.date()
        made, deadline = 0, time.monotonic() + self.budget.total_seconds()
        for i, (site_id, range_name, prop) in enumerate(reads):
            if i and time.monotonic() >= deadline:
                log.warning("made the rows of %d of %d dashboard reads in %s; the others make them when first read",
                            i, len(reads), self.budget)
                break
            try:
                await self._make(site_id, range_name, prop)
                made += 1
            except Exception:  # one site's failure leaves the others' rows to be made
                log.exception("could not make the day's rows site=%s range=%s property=%s", site_id, range_name, prop)
        return made

    async def _make(self, site_id: str, range_name: str, prop: str) -> None:
        goals: list[store.Goal] = []
        async with self.pool.acquire() as conn:
            site = await site_store.site_by_id(conn, site_id)  # its time zone places the window
            if site is None:
                return
            if prop == "goal":
                goals = await store.site_goals(conn, site_id)
            since = await first_day(conn, site_id, site["time_zone"]) if range_name == ALL else None
        w, db = window_for(range_name, time_zone=site["time_zone"], since=since), self.analytics
        if not analytics_days.whole_days(w.start, w.end):
            return  # nothing of such a window is kept by the day
        if prop == OVERVIEW:
            days = await analytics_days.counted_days(db, site_id, w.start, w.end)
            await analytics_overview.visitors(db, site_id, w.start, w.end, days)
            return
        domain = site["domain"] if prop == "referrer" else None  # its rows leave the site's own pages out
        await analytics_breakdown.breakdown(db, site_id, w.start, w.end, prop=prop, goals=goals, limit=1, offset=0,
                                            filters=store.Filters(goals=tuple(goals)), metrics=("visitors",),
                                            domain=domain)
