"""Keyed reports (GET /v1/reports/{id}/run) and dashboard chart data against a plain Python reading of their
documented semantics (tests/reports_reference.py), on small random data sent through the API: a few users and
anonymous ids, events at bucket edges, month ends and a leap day, same-instant events, microsecond times, an
identify that merges an anonymous id (and one that merges another user), erasures, events after them.
TALLY_REFERENCE_SEEDS=1,2,...,40 runs more data sets than the two of the suite."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tests import reports_reference as ref
from tests.conftest import bearer
from tests.reports_reference import Event, World

BASE = datetime(2024, 1, 29, tzinfo=UTC)  # a Monday; the data runs over Jan 31, Feb 29 and into March
DAYS = 36
NAMES = ["a", "b", "c"]
USERS = [f"u{i}" for i in range(6)]
ANONS = ["a0", "a1", "a2", "u5"]  # "u5" as an anonymous id is another actor than the user u5
PLANS = ["pro", "free", 5, 2.5, 10.0, True, None, {"t": 1}, [1, 2], "", "PRO plan", "12", "10", "missing"]
GROUPS = [None, "plan", "properties.plan", "properties.meta.k", "traits.plan", "traits.meta.k"]
FILTERS = [("plan", "eq", "pro"), ("plan", "neq", "free"), ("plan", "contains", "pro"), ("plan", "gt", 2),
           ("plan", "lt", 6), ("plan", "eq", 5), ("plan", "eq", True), ("plan", "neq", 2.5), ("plan", "eq", 10.0),
           ("plan", "neq", 10), ("plan", "eq", "12"), ("plan", "gt", 9.5)]


class Gen:
    def __init__(self, seed: int, base: datetime = BASE) -> None:
        self.rnd = random.Random(seed)
        self.base = base
        self.seen: list[datetime] = []

    def instant(self) -> datetime:
        rnd = self.rnd
        if self.seen and rnd.random() < 0.2:
            return rnd.choice(self.seen)  # the same instant as an earlier event
        day = self.base + timedelta(days=rnd.randrange(DAYS))
        kind = rnd.random()
        if kind < 0.25:
            moment = day
        elif kind < 0.35:
            moment = day - timedelta(microseconds=1)
        elif kind < 0.5:
            moment = day + timedelta(hours=rnd.randrange(24))
        elif kind < 0.6:
            moment = day + timedelta(hours=rnd.randrange(24), microseconds=rnd.choice([1, 500, 999_999]))
        else:
            moment = day + timedelta(seconds=rnd.randrange(86_400), microseconds=rnd.randrange(1_000_000))
        self.seen.append(moment)
        return moment

    def event(self, users: list[str], anons: list[str]) -> tuple[dict, Event]:
        rnd = self.rnd
        kind = rnd.random()
        user = rnd.choice(users) if kind < 0.8 else None
        anon = rnd.choice(anons) if kind >= 0.7 else None
        props: dict = {}
        plan = rnd.choice(PLANS)
        if plan != "missing":
            props["plan"] = plan
        if rnd.random() < 0.5:
            props["meta"] = {"k": rnd.choice(["x", "y", 3])}
        at = self.instant()
        body = {"event": rnd.choice(NAMES), "properties": props, "timestamp": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        if user:
            body["user_id"] = user
        if anon:
            body["anonymous_id"] = anon
        return body, Event(body["event"], user, anon, at, props)

    def bound(self) -> tuple[str, datetime]:
        """A from/to as sent, and the time the server reads from it."""
        rnd = self.rnd
        moment = self.instant() if rnd.random() < 0.6 else self.base + timedelta(days=rnd.randrange(-2, DAYS + 2))
        form = rnd.choice(["ms", "us", "date", "offset"])
        if form == "date" and moment == moment.replace(hour=0, minute=0, second=0, microsecond=0):
            return moment.strftime("%Y-%m-%d"), moment
        if form == "ms":
            moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
            return ref.iso(moment), moment
        if form == "offset":
            return moment.astimezone(timezone(timedelta(hours=2))).isoformat(), moment
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), moment

    def range(self, max_span: timedelta | None = None) -> tuple[dict, datetime, datetime]:
        while True:
            (f, start), (t, end) = self.bound(), self.bound()
            if start < end and (max_span is None or end - start <= max_span):
                return {"from": f, "to": t}, start, end


async def _post(client, key, path, body, status=200):
    resp = await client.post(path, json=body, headers=bearer(key))
    assert resp.status == status, await resp.text()
    return await resp.json() if resp.status != 204 else None


async def _send(client, key, gen: Gen, world: World, n: int, users: list[str], anons: list[str]) -> None:
    pairs = []
    for _ in range(n):
        body, event = gen.event(users, anons)
        if pairs and gen.rnd.random() < 0.3:  # another event of the previous one's actor at its very instant
            before = pairs[-1][0]
            name = gen.rnd.choice([n for n in NAMES if n != before["event"]])
            body = {**body, "event": name, "timestamp": before["timestamp"], "user_id": before.get("user_id"),
                    "anonymous_id": before.get("anonymous_id")}
            body = {k: v for k, v in body.items() if v is not None}
            event = Event(name, body.get("user_id"), body.get("anonymous_id"), pairs[-1][1].ts, event.props)
        pairs.append((body, event))
    body = await _post(client, key, "/v1/events/batch", {"events": [b for b, _ in pairs]})
    assert body["failed"] == 0, body
    for _, event in pairs:
        world.add(event)


async def _build(client, key, gen: Gen) -> World:
    rnd, world = gen.rnd, World()
    await _send(client, key, gen, world, 90, USERS, ANONS)
    for user in USERS[:4]:
        traits = {"plan": rnd.choice(PLANS[:-1]), **({"meta": {"k": rnd.choice(["x", "y"])}} if rnd.random() < .6
                                                     else {})}
        await _post(client, key, "/v1/identify", {"user_id": user, "traits": traits})
        world.identify(user, traits, None)
    # Merges: an anonymous id into a user, and (an identify's anonymous_id may name one) a user into another.
    for user, merged in (("u1", "a0"), (rnd.choice(["u0", "u2"]), "u4")):
        traits = {"plan": rnd.choice(["pro", "free"])}
        await _post(client, key, "/v1/identify", {"user_id": user, "anonymous_id": merged, "traits": traits})
        world.identify(user, traits, merged)
    await _send(client, key, gen, world, 30, USERS, ANONS)  # a0 sent alone later stays anonymous
    for erased in ("u3", rnd.choice(["a1", "a0"])):  # a0 was merged into u1: its later anonymous events go
        resp = await client.delete(f"/v1/users/{erased}", headers=bearer(key))
        assert resp.status == 204
        world.erase(erased)
    await _send(client, key, gen, world, 15, ["u3", "u5"], ["a0", "a1", "a2"])  # after the erasures: kept
    return world


async def _run(client, key, report: dict) -> dict:
    made = await _post(client, key, "/v1/reports", {"name": "r", **report}, 201)
    resp = await client.get(f"/v1/reports/{made['id']}/run", headers=bearer(key))
    assert resp.status == 200, await resp.text()
    return await resp.json()


def _sorted(rows: list[list]) -> list[list]:
    return sorted(rows, key=lambda r: [(v is None, str(v)) for v in r])


async def _check_reports(client, key, gen: Gen, world: World) -> None:
    rnd = gen.rnd
    for i in range(8):
        events = rnd.sample([*NAMES, "zz"], rnd.randint(1, 3))
        interval = ["hour", "day", "week"][i % 3]
        group = rnd.choice(GROUPS)
        bounds, start, end = gen.range()
        config = {"events": events, "interval": interval, **bounds, **({"group_by": group} if group else {})}
        got = await _run(client, key, {"type": "event_volume", "config": config})
        want = ref.event_volume(world, events, start, end, interval, group)
        assert _sorted(got["rows"]) == _sorted(want), config
        buckets = [r[0] for r in got["rows"]]
        assert buckets == sorted(buckets), config
    for _ in range(10):
        steps = [rnd.choice(NAMES) for _ in range(rnd.randint(2, 4))]
        window = rnd.randint(1, 3)
        group = rnd.choice(GROUPS)
        bounds, start, end = gen.range()
        config = {"events": steps, "conversion_window_days": window, **bounds, **({"group_by": group} if group else {})}
        got = await _run(client, key, {"type": "funnel", "config": config})
        assert got["rows"] == ref.funnel(world, steps, start, end, window, group), config
    for _ in range(6):
        start_event, return_event = rnd.choice(NAMES), rnd.choice(NAMES)
        period, periods = rnd.choice(["day", "week"]), rnd.randint(1, 6)
        bounds, start, end = gen.range()
        config = {"start_event": start_event, "return_event": return_event, "period": period, "periods": periods,
                  **bounds}
        got = await _run(client, key, {"type": "retention", "config": config})
        want = ref.retention(world, start_event, return_event, start, end, period, periods, datetime.now(UTC))
        assert got["rows"] == want, config


async def _check_charts(client, key, gen: Gen, world: World) -> None:
    rnd = gen.rnd
    specs = []
    for i in range(20):
        kind = ["line", "bar", "pie", "table", "funnel", "funnel"][i % 6]
        filters = [{"property": p, "operator": o, "value": v} for p, o, v in rnd.sample(FILTERS, rnd.randint(0, 2))]
        spec = {"title": "c", "type": kind, "event": rnd.choice(NAMES[:2] if kind == "funnel" else NAMES),
                "filters": filters,
                "group_by": None if kind == "funnel" else rnd.choice([None, "plan", "meta"])}
        if kind == "funnel":
            spec["steps"] = [rnd.choice(NAMES[:2]) for _ in range(rnd.randint(1, 3))]
        specs.append(spec)
    made = await _post(client, key, "/v1/dashboards", {"name": "d", "charts": specs}, 201)
    for spec, chart in zip(specs, made["charts"], strict=True):
        interval = rnd.choice(["hour", "day"])
        bounds, start, end = gen.range(timedelta(days=3) if interval == "hour" else None)
        resp = await client.get(f"/v1/dashboards/{made['id']}/charts/{chart['id']}/data",
                                params={**bounds, "interval": interval}, headers=bearer(key))
        assert resp.status == 200, await resp.text()
        got = {s["name"]: [p["value"] for p in s["points"]] for s in (await resp.json())["series"]}
        assert got == ref.chart(world, spec, start, end, interval), (spec, bounds, interval)


@pytest.mark.parametrize("seed", [int(s) for s in os.environ.get("TALLY_REFERENCE_SEEDS", "1,2").split(",")])
async def test_reports_and_charts_match_the_reference(client, make_key, seed):
    key = await make_key("read,write,admin")
    gen = Gen(seed)
    world = await _build(client, key, gen)
    await _check_reports(client, key, gen, world)
    await _check_charts(client, key, gen, world)


async def test_without_bounds_reports_cover_the_30_days_to_now_and_periods_not_begun_are_null(client, make_key):
    """Data over the last weeks up to now: reports without from/to, and retention periods after now."""
    key = await make_key("read,write,admin")
    now = datetime.now(UTC)
    gen = Gen(7, base=now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=DAYS - 1))
    gen.seen = [now - timedelta(days=40)]  # one event before the default range
    world = await _build(client, key, gen)
    world.events = [e for e in world.events if e.ts <= now]  # (the ingested ones after now are never counted)
    nulls = 0
    for report in ({"type": "event_volume", "config": {"events": NAMES, "group_by": "traits.plan"}},
                   {"type": "funnel", "config": {"events": ["a", "b", "a"], "group_by": "plan"}},
                   {"type": "retention", "config": {"events": ["a", "b"], "period": "day", "periods": 10}},
                   {"type": "retention", "config": {"events": ["c", "c"], "period": "week", "periods": 3}}):
        got = await _run(client, key, report)
        at = datetime.fromisoformat(got["generated_at"].replace("Z", "+00:00"))
        start, config = at - timedelta(days=30), report["config"]
        if report["type"] == "event_volume":
            assert _sorted(got["rows"]) == _sorted(ref.event_volume(world, NAMES, start, at, "day", "traits.plan"))
        elif report["type"] == "funnel":
            assert got["rows"] == ref.funnel(world, config["events"], start, at, 7, "plan")
        else:
            want = ref.retention(world, *config["events"], start, at, config["period"], config["periods"], at)
            assert got["rows"] == want, config
            nulls += sum(row.count(None) for row in want)
    assert nulls  # periods not begun were compared
