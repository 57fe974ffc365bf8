"""Open visits: which visit each site event belongs to, and how that visit arrived.

A visit ends after 30 minutes without events. An event finds its visit two ways:
- by its client session id (`sid`), once a visit has taken that id: a server-side sender reusing a page's
  id joins that page's visit;
- by its visitor key (daily salt, site, IP, User-Agent), as Plausible does: events without `sid`, and the
  tracker's page-load ids (`visit: "join"`), continue the visitor's open visit. A multi-page site's
  tracker makes a new in-memory id on every page load; without this each page would be a visit of one
  pageview (100% bounces).
A new visit takes the event's `sid` as its id (else a new `ses_` id) and the event's acquisition (UTM fields,
source, channel); every later event of the visit is stored with the visit's id and acquisition, so each
visit counts once under the one source it came from, as Plausible's sessions do.

`sid` without `visit` (server-side senders, older trackers) is exactly the session id and leaves the
visitor's open visit alone: a backend sending several users' ids from one address merges none of them.
`visit: "new"` (the tracker's id after reset()) starts its own visit and makes it the visitor's open one,
so the next page load continues it.

The state lives in process memory, or in Redis when configured so that every process continues the same
visits. Times come from the events (server receive times), so tests move a clock, not the wall. While
Redis is unreachable, visits are assigned in process memory (counted as fallbacks): a visit then may start
anew where Redis would have continued one, but no event is refused. In memory, each table keeps at most
`MAX_OPEN_VISITS` entries: past it the least recently seen is forgotten (its visitor's next event starts a
new visit), so a flood of page loads or ids cannot grow the process without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal, NamedTuple

import orjson
from redis.asyncio import Redis

from common.outages import REDIS_UNREACHABLE, DependencyDown, Outages, ask_redis
from common.redis_scripts import VISIT_ASSIGN
from storage.ids import new_id

SESSION_TIMEOUT_MS = 30 * 60 * 1000
# Entries per table (visitors, sids) of one process's memory: ~250 bytes each, so ~250 MB for both at most.
MAX_OPEN_VISITS = 500_000

# utm_source, utm_medium, utm_campaign, utm_term, utm_content, source, channel (app/acquisition.py)
Acquisition = tuple[str | None, ...]
# How an event's sid relates to visits: "exact" a server-side sender's id, "join" a tracker's page-load id,
# "new" a tracker's id after reset(); None: no sid.
SidMode = Literal["exact", "join", "new"] | None


class VisitIn(NamedTuple):
    visitor: str  # daily visitor key (a hash)
    at: int  # event time, ms
    sid: str | None = None
    mode: SidMode = None
    acquisition: Acquisition = ()


class Assigned(NamedTuple):
    session_id: str
    acquisition: Acquisition


def new_session_id() -> str:
    return new_id("ses")


@dataclass(slots=True)
class _Visit:
    id: str
    last: int
    acquisition: Acquisition


class MemorySessions:
    def __init__(self, timeout_ms: int = SESSION_TIMEOUT_MS, capacity: int = MAX_OPEN_VISITS) -> None:
        self.timeout_ms = timeout_ms
        self.capacity = capacity
        # One _Visit object is shared by its visitor's entry and by every sid that joined it. Each table is
        # in the order its entries were last used, so the first is the one to forget when it is full.
        self._by_visitor: OrderedDict[tuple[str, str], _Visit] = OrderedDict()
        self._by_sid: OrderedDict[tuple[str, str], _Visit] = OrderedDict()
        self._last_sweep = 0

    def _keep(self, table: OrderedDict[tuple[str, str], _Visit], key: tuple[str, str], visit: _Visit) -> None:
        table[key] = visit
        table.move_to_end(key)
        if len(table) > self.capacity:
            table.popitem(last=False)

    def _fresh(self, table: OrderedDict[tuple[str, str], _Visit], key: tuple[str, str], at: int) -> _Visit | None:
        visit = table.get(key)
        return visit if visit is not None and at - visit.last <= self.timeout_ms else None

    async def assign(self, site_id: str, visits: list[VisitIn]) -> list[Assigned]:
        """The visit of each event, in order: a later event of the batch sees the earlier ones."""
        out = []
        for v in visits:
            visit = self._fresh(self._by_sid, (site_id, v.sid), v.at) if v.sid is not None else None
            if visit is None and v.mode in (None, "join"):
                visit = self._fresh(self._by_visitor, (site_id, v.visitor), v.at)
            if visit is None:
                visit = _Visit(v.sid or new_session_id(), v.at, v.acquisition)
            else:
                visit.last = max(visit.last, v.at)
            if v.sid is not None:
                self._keep(self._by_sid, (site_id, v.sid), visit)
            if v.mode != "exact":
                self._keep(self._by_visitor, (site_id, v.visitor), visit)
            out.append(Assigned(visit.id, visit.acquisition))
        if visits:
            self._sweep(max(v.at for v in visits))
        return out

    def _sweep(self, now_ms: int) -> None:
        """Forget ended visits once a minute, so memory follows the number of live visitors."""
        if now_ms - self._last_sweep < 60_000:
            return
        self._last_sweep = now_ms
        for table in (self._by_visitor, self._by_sid):
            ended = [k for k, visit in table.items() if now_ms - visit.last > self.timeout_ms]
            for key in ended:
                del table[key]


# The script's one-letter modes (common/redis_scripts.py VISIT_ASSIGN).
_MODE_LETTER = {None: "v", "join": "j", "new": "n", "exact": "x"}


class RedisSessions:
    def __init__(self, redis: Redis, outages: Outages, timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms
        self._redis = redis
        self._script = redis.register_script(VISIT_ASSIGN)
        self._outages = outages
        self._fallback = MemorySessions(timeout_ms)

    async def assign(self, site_id: str, visits: list[VisitIn]) -> list[Assigned]:
        if not visits:
            return []
        try:
            # Bounded: a stalled Redis would hold the flush for the client's socket timeout (5 s), past the
            # commit's bound, and the batch's submitters were answered 503 though memory could have served them.
            return await ask_redis(self._outages, self._assign(site_id, visits))
        except DependencyDown:  # down, and asked within the last PROBE_SECONDS
            self._outages.fallback("sessions", None)
        except REDIS_UNREACHABLE as exc:  # a timeout too
            self._outages.fallback("sessions", exc)
        return await self._fallback.assign(site_id, visits)

    async def _assign(self, site_id: str, visits: list[VisitIn]) -> list[Assigned]:
        # Keys outlive the timeout a little; the script compares times itself, so an injected clock works.
        ttl = self.timeout_ms + 5 * 60 * 1000
        keys: list[str] = []
        args: list[int | str] = [self.timeout_ms, ttl]
        for v in visits:
            visitor_key = f"tally:visitor:{site_id}:{v.visitor}"
            # Without a sid the second key is never read or written; the visitor's stands in for it.
            keys += [visitor_key, f"tally:sid:{site_id}:{v.sid}" if v.sid is not None else visitor_key]
            args += [v.at, v.sid or new_session_id(), _MODE_LETTER[v.mode],
                     orjson.dumps(v.acquisition).decode()]
        replies = await self._script(keys=keys, args=args)
        text = [r.decode() if isinstance(r, bytes) else str(r) for r in replies]
        return [Assigned(text[i], tuple(orjson.loads(text[i + 1]))) for i in range(0, len(text), 2)]


def make_sessions(redis: Redis | None, outages: Outages) -> MemorySessions | RedisSessions:
    return RedisSessions(redis, outages) if redis is not None else MemorySessions()
