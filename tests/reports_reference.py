"""A plain Python reading of the keyed reports' and chart data's documented semantics (docs/decisions.md,
"Reports (keyed API)" and "Keyed dashboards and charts"), for tests/test_reports_reference.py to compare the
engine with. Everything here works on a list of events as PostgreSQL holds them after merges and erasures."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

MS = timedelta(microseconds=999)
STEP = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
_NUMERIC = re.compile(r"^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?\s*$")


@dataclass
class Event:
    name: str
    user_id: str | None
    anonymous_id: str | None
    ts: datetime
    props: dict
    seq: int = 0  # the order it was sent in, which is its id's order (storage/ids.py makes ids in order)

    @property
    def actor(self) -> str:
        return self.user_id if self.user_id is not None else "anon:" + (self.anonymous_id or "")


@dataclass
class World:
    """The events and profiles (user id -> traits) PostgreSQL holds."""

    events: list[Event] = field(default_factory=list)
    traits: dict[str, dict] = field(default_factory=dict)
    sent: int = 0

    def add(self, event: Event) -> None:
        self.sent += 1
        event.seq = self.sent
        self.events.append(event)
        if event.user_id is not None:
            self.traits.setdefault(event.user_id, {})

    def identify(self, user: str, traits: dict, anonymous_id: str | None) -> None:
        self.traits[user] = {**self.traits.get(user, {}), **traits}
        if anonymous_id is None or anonymous_id == user:
            return
        for e in self.events:  # the alias: the id's anonymous events and any stored under it as a user id
            if e.user_id == anonymous_id or (e.user_id is None and e.anonymous_id == anonymous_id):
                e.user_id = user
        self.traits[user] = {**self.traits.pop(anonymous_id, {}), **self.traits[user]}

    def erase(self, user: str) -> None:
        self.events = [e for e in self.events
                       if e.user_id != user and not (e.user_id is None and e.anonymous_id == user)]
        self.traits.pop(user, None)


def text(value: Any, pg: bool = False) -> str | None:
    """A JSON value as a report reads it: strings bare, null as None, other values as JSON text. Traits come from
    PostgreSQL (`#>>`: `10.0`, `[1, 2]`), event properties from the analytics store (a decimal as its double's
    shortest text, `10`; arrays and objects without spaces, `[1,2]`), docs/decisions.md."""
    if value is None or isinstance(value, str):
        return value
    if pg:
        return json.dumps(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return json.dumps(value, separators=(",", ":"))


def at_path(props: dict, path: list[str], pg: bool = False) -> str | None:
    value: Any = props
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return text(value, pg)


def trunc(moment: datetime, interval: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    if interval == "hour":
        return moment
    moment = moment.replace(hour=0)
    return moment - timedelta(days=moment.weekday()) if interval == "week" else moment


def through(to: datetime) -> datetime:
    return to if to.microsecond % 1000 else to + MS


def ratio(part: int, whole: int) -> float | None:
    return float((Decimal(part) / Decimal(whole)).quantize(Decimal("0.0001"), ROUND_HALF_UP)) if whole else None


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _group(world: World, e: Event, group_by: str | None) -> str | None:
    if group_by is None:
        return None
    kind, _, rest = group_by.partition(".")
    if kind == "traits" and rest:
        return at_path(world.traits.get(e.user_id, {}), rest.split("."), True) if e.user_id is not None else None
    path = rest.split(".") if kind == "properties" and rest else group_by.split(".")
    return at_path(e.props, path)


def event_volume(world: World, events: list[str], start: datetime, to: datetime, interval: str,
                 group_by: str | None) -> list[list]:
    end = through(to)
    counts: Counter = Counter()
    for e in world.events:
        if e.name in events and start <= e.ts <= end:
            counts[(trunc(e.ts, interval), e.name, _group(world, e, group_by))] += 1
    keys = {(name, g) for _, name, g in counts} if group_by else set()
    keys |= {(name, None) for name in events if name not in {k[0] for k in keys}}
    rows, at = [], trunc(start, interval)
    while at <= end:
        rows += [[iso(at), name, *([g] if group_by else []), counts[(at, name, g)]] for name, g in keys]
        at += STEP[interval]
    return rows


def funnel(world: World, steps: list[str], start: datetime, to: datetime, window_days: int,
           group_by: str | None) -> list[list]:
    """The rows. Of an actor's step-1 events at its entry's instant, the one with the lower event id gives the
    group."""
    end, window = through(to), timedelta(days=window_days)
    by_actor: dict[str, list[Event]] = {}
    for e in world.events:
        by_actor.setdefault(e.actor, []).append(e)
    reached: dict[str | None, list[int]] = {}
    for actor, evs in by_actor.items():
        entries = [e for e in evs if e.name == steps[0] and start <= e.ts <= end]
        if not entries:
            continue
        entry = min(entries, key=lambda e: (e.ts, e.seq))
        t1 = entry.ts
        group = _group(world, entry, group_by)
        if group_by and group_by.startswith("traits.") and actor.startswith("anon:"):
            group = None
        level, prev = 1, t1
        for step in steps[1:]:
            later = [e.ts for e in evs if e.name == step and prev < e.ts <= t1 + window]
            if not later:
                break
            level, prev = level + 1, min(later)
        per = reached.setdefault(group, [0] * len(steps))
        for k in range(level):
            per[k] += 1
    if not reached:
        reached[None] = [0] * len(steps)
    rows = []
    for g in sorted(reached, key=lambda g: (g is None, g or "")):
        users = reached[g]
        for k, n in enumerate(users):
            rows.append([k + 1, steps[k], *([g] if group_by else []), n, ratio(n, users[0]),
                         ratio(n, users[k - 1] if k else n)])
    return rows


def retention(world: World, start_event: str, return_event: str, start: datetime, to: datetime, period: str,
              periods: int, now: datetime) -> list[list]:
    end, step = through(to), STEP[period]
    firsts: dict[str, datetime] = {}
    for e in world.events:
        if e.name == start_event:
            firsts[e.actor] = min(firsts.get(e.actor, e.ts), e.ts)
    cohorts = {a: trunc(t, period) for a, t in firsts.items() if start <= t <= end}
    returned = {(cohorts[e.actor], (trunc(e.ts, period) - cohorts[e.actor]) // step, e.actor)
                for e in world.events if e.name == return_event and e.actor in cohorts}
    counts = Counter((c, k) for c, k, _ in returned)
    sizes = Counter(cohorts.values())
    return [[iso(c), n, *(None if c + k * step > now else ratio(counts[(c, k)], n) for k in range(1, periods + 1))]
            for c, n in sorted(sizes.items())]


def _passes(e: Event, filters: list[dict]) -> bool:
    for f in filters:
        x, v, op = at_path(e.props, [f["property"]]), f["value"], f["operator"]
        if op in ("eq", "neq"):
            same = x is not None and x in {v if isinstance(v, str) else json.dumps(v), text(v)}
            if same != (op == "eq"):
                return False
        elif op == "contains":
            if x is None or str(v).lower() not in x.lower():
                return False
        elif x is None or not _NUMERIC.match(x) or not (float(x) > v if op == "gt" else float(x) < v):
            return False
    return True


def chart(world: World, spec: dict, start: datetime, to: datetime, interval: str) -> dict[str, list[int]]:
    """Series name -> point values."""
    end = through(to)
    matched = [e for e in world.events if start <= e.ts <= end and _passes(e, spec["filters"])]
    if spec["type"] == "funnel":
        return {name: [n] for name, n in _chart_funnel(matched, [spec["event"], *spec["steps"]])}
    group = spec["group_by"]
    counts: Counter = Counter()
    for e in matched:
        if e.name == spec["event"]:
            value = at_path(e.props, [group]) if group is not None else None
            g = spec["event"] if group is None else "(none)" if value is None else value
            counts[(g, trunc(e.ts, interval) if spec["type"] in ("line", "bar") else None)] += 1
    names = {g for g, _ in counts} or ({spec["event"]} if group is None else set())
    if spec["type"] not in ("line", "bar"):
        return {g: [counts[(g, None)]] for g in names}
    stamps, at = [], trunc(start, interval)
    while at <= trunc(end, interval):
        stamps.append(at)
        at += STEP[interval]
    return {g: [counts[(g, s)] for s in stamps] for g in names}


def _deepest(steps: list[str], times: dict[str, list[datetime]], chosen: list[datetime]) -> int:
    """How many steps can be done after the times `chosen` for the first ones (exhaustive search)."""
    i = len(chosen)
    if i == len(steps):
        return i
    best = i
    for t in times[steps[i]]:
        if (chosen and t < chosen[-1]) or any(steps[j] == steps[i] and t <= chosen[j] for j in range(i)):
            continue
        best = max(best, _deepest(steps, times, [*chosen, t]))
        if best == len(steps):
            break
    return best


def _chart_funnel(events: list[Event], steps: list[str]) -> list[tuple[str, int]]:
    """Users who did steps[0..i] in order: times never decreasing, and a step whose name came before needs
    an event later than that earlier step's (so no event serves two steps)."""
    reached = [0] * len(steps)
    for actor in {e.actor for e in events}:
        times = {s: sorted(e.ts for e in events if e.actor == actor and e.name == s) for s in set(steps)}
        for k in range(_deepest(steps, times, [])):
            reached[k] += 1
    return list(zip(steps, reached, strict=True))
