"""The visitor states of a window's ended days, cached whole (site_window_visitors: the overview's visitors)
and per value of a dimension or per goal (site_window_keys: the breakdowns' visitors), made by the first read
that lacks them once the days' last insert has settled, and used while no insert has touched the days. The
days' own rows and counts are storage/analytics_days.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timedelta

from storage.analytics_days import (
    CLOCK,
    NONE,
    TS,
    WINDOWS,
    WRITTEN,
    CountedDays,
    as_utc,
    other_days,
    store_now,
    whole_days,
)
from storage.clickhouse import AnalyticsStore, Params

# In cluster mode an INSERT into a Distributed table that SELECTs from one runs on every shard by default
# (parallel_distributed_insert_select), each shard inserting what it selects into its own local table: a
# window's merged states would be written on every shard, empty ones where the site's days are not. They
# are selected once here, and their rows go to the site's shard.
_INSERT_HERE = {"parallel_distributed_insert_select": 0}


async def written_days(store: AnalyticsStore, site_id: str, days: list[date], *,
                       keys_dim: str | None = None) -> CountedDays:
    """The last insert into each of the (consecutive) `days` and the store's clock, with no day counted: what
    visitor_states needs, for a read beside an overview that may be counting the same days. With `keys_dim`,
    also the latest complete per-key states under that dim (site_window_keys's marker rows) of the runs from
    the first day, as `windows`, read in the same query (a look of their own cost a panel ~5-8 ms more)."""
    q = Params()
    site, first = q.bind(site_id), q.bind(days[0], "Date")
    made = (f"UNION ALL SELECT {WINDOWS}, last, max(computed) FROM {store.table('site_window_keys')} WHERE "
            f"site_id = {site} AND first = {first} AND dim = {q.bind(keys_dim)} AND key = '' GROUP BY last "
            if keys_dim is not None else "")
    rows = await store.query(
        f"SELECT {WRITTEN}, day, max(written) FROM {store.table('site_days')} WHERE site_id = {site} "
        f"AND day >= {first} AND day <= {q.bind(days[-1], 'Date')} GROUP BY day {made}"
        f"UNION ALL SELECT {CLOCK}, today(), now64(6, 'UTC')", q.params)
    written = {day: at for kind, day, at in rows if kind == WRITTEN}
    windows = {(days[0], last): at for kind, last, at in rows if kind == WINDOWS}
    # No day written: no clock either, as before the union (callers take that for "nothing to cache").
    now = next(at for kind, _, at in rows if kind == CLOCK) if written else None
    return CountedDays([], [], written=written, now=now, windows=windows)


def _settled_run(store: AnalyticsStore, whole: list[date],
                 counted: CountedDays) -> tuple[list[date], datetime] | None:
    """The ended days of `whole` and their last insert, when a cached state may stand for them: more than
    one day, and that insert settled. None otherwise."""
    ended = [d for d in whole if counted.now is not None and d < counted.now.date()]
    last_write = max((counted.written[d] for d in ended if d in counted.written), default=None)
    if len(ended) > 1 and last_write is not None and last_write + timedelta(seconds=store.settle_seconds) < counted.now:
        return ended, as_utc(last_write)
    return None


def _read_state(store: AnalyticsStore, counted: CountedDays, ended: list[date],
                last_write: datetime) -> datetime | None:
    """The cached state of the `ended` days that the lookup read with `counted` (CountedDays.windows), when
    newer than their last insert plus the settle time: usable without looking again. None otherwise."""
    known = counted.windows.get((ended[0], ended[-1]))
    if known is not None and as_utc(known) > last_write + timedelta(seconds=store.settle_seconds):
        return as_utc(known)
    return None


async def visitor_states(q: Params, store: AnalyticsStore, site_id: str, whole: list[date],
                         counted: CountedDays) -> str:
    """A subquery of uniqExact states (column s) whose merge is the visitors of the `whole` days (consecutive):
    the cached state of the window's ended days when up to date (made by the first read that lacks it, once
    their last insert has settled) and the day rows of the other days."""
    settled = _settled_run(store, whole, counted)
    rest = whole
    cached = ""
    if settled:
        ended, last_write = settled
        site, first, last = q.bind(site_id), q.bind(ended[0], "Date"), q.bind(ended[-1], "Date")
        since = q.bind(last_write + timedelta(seconds=store.settle_seconds), TS)
        window = (f"{store.table('site_window_visitors')} WHERE site_id = {site} AND first = {first} "
                  f"AND last = {last} AND computed > {since}")

        async def make() -> None:
            if _read_state(store, counted, ended, last_write) is not None:
                return  # made: counted_days read it
            if not (await store.query(f"SELECT count() FROM {window}", q.params))[0][0]:
                at = await store_now(store)
                await store.command(
                    f"INSERT INTO {store.table('site_window_visitors')} (site_id, first, last, computed, visitors) "
                    f"SELECT {site}, {first}, {last}, {q.bind(at, TS)}, uniqExactMergeState(visitors) FROM "
                    f"{store.table('site_days')} WHERE site_id = {site} AND day >= {first} AND day <= {last}",
                    q.params, settings=_INSERT_HERE if store.cluster else None)

        # The overview and the goals ask for it at once when the dashboard opens: one of them makes it (callers
        # that saw the same last insert; a state made before a later one would not do for a reader of it).
        await store.once(("window visitors", site_id, ended[0], ended[-1], last_write), make)
        cached = f"(SELECT visitors AS s FROM {window} ORDER BY computed DESC LIMIT 1) UNION ALL "
        rest = [d for d in whole if d > ended[-1]]
    return (f"({cached}SELECT visitors AS s FROM {store.table('site_days')} WHERE site_id = {q.bind(site_id)} "
            f"AND day IN {q.bind(rest, 'Array(Date)')})")


async def key_visitor_states(q: Params, store: AnalyticsStore, site_id: str, start: datetime, end: datetime,
                             dim: str, key_of: Callable[[Params], str], *, counts: bool = False,
                             only: str = "") -> tuple[str, str] | None:
    """Per key of the window's ended days: a subquery of (key, s, e) rows, s a uniqExact state of the visitors
    of the days' events with that key and e (when `counts`) how many events (read with FINAL), and the
    condition on site_events rows of the window that leaves those days out (other_days); None when no
    cached state may stand for them. `key_of(params)` is the key of an event, as a site_events expression
    ('' for none; it binds its own values); `only`, a constant condition on the site_events rows the states
    count (the page panel's pageviews), which `dim` must name apart. The rows are cached in site_window_keys
    under `dim`, made by the first read that lacks them once the days' last insert has settled, and used
    while no insert has touched the days. It counts no day (written_days), so it runs beside an overview that may."""
    whole = whole_days(start, end)
    written = await written_days(store, site_id, whole, keys_dim=dim) if whole else NONE
    settled = _settled_run(store, whole, written) if whole else None
    if not settled:
        return None
    ended, last_write = settled
    table = store.table("site_window_keys")
    w = Params()
    site, first, last, named = w.bind(site_id), w.bind(ended[0], "Date"), w.bind(ended[-1], "Date"), w.bind(dim)
    run = f"site_id = {site} AND first = {first} AND last = {last} AND dim = {named}"
    final, events = (" FINAL", "count()") if counts else ("", "0")

    async def make() -> datetime:
        if (known := _read_state(store, written, ended, last_write)) is not None:
            return known  # complete: written_days read its marker
        since = w.bind(last_write + timedelta(seconds=store.settle_seconds), TS)
        made = await store.query(f"SELECT computed FROM {table} WHERE {run} AND key = '' AND computed > {since} "
                                 "ORDER BY computed DESC LIMIT 1", w.params)
        if made:
            return as_utc(made[0][0])
        at = await store_now(store)
        stamp = w.bind(at, TS)
        # The rows, then the marker that completes them: an insert cut short is never read.
        await store.command(
            f"INSERT INTO {table} (site_id, first, last, dim, computed, key, visitors, events) SELECT {site}, "
            f"{first}, {last}, {named}, {stamp}, {key_of(w)} AS key, uniqExactStateIf(visitor, visitor != 0), "
            f"{events} FROM {store.table('site_events')}{final} WHERE site_id = {site} AND toDate(ts) >= {first} "
            f"AND toDate(ts) <= {last}{f' AND {only}' if only else ''} AND key != '' GROUP BY key",
            w.params, settings=_INSERT_HERE if store.cluster else None)
        await store.command(
            f"INSERT INTO {table} (site_id, first, last, dim, computed, key, visitors) SELECT {site}, {first}, "
            f"{last}, {named}, {stamp}, '', uniqExactStateIf(toUInt64(0), false)", w.params)
        return at

    made = await store.once(("window keys", site_id, ended[0], ended[-1], dim, last_write), make)
    return (f"(SELECT key, visitors AS s, events AS e FROM {table} WHERE site_id = {q.bind(site_id)} AND first = "
            f"{q.bind(ended[0], 'Date')} AND last = {q.bind(ended[-1], 'Date')} AND dim = {q.bind(dim)} "
            f"AND computed = {q.bind(made, TS)} AND key != '')"), other_days(q, start, end, ended)
