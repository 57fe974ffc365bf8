"""Funnel, retention and event volume on the analytics store against a straightforward computation of the same
numbers in Python, on random keyed events (repeated step names, anonymous actors, JSON property types, user
traits), before and after the mirror wrote every event again (a retried batch): no answer may change."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest

from app.appkeys import ANALYTICS, MIRROR
from storage import analytics_mirror, report_queries
from storage import events as event_store
from storage.clickhouse_layout import ensure_schema
from storage.events import EventRow
from storage.ids import new_id
from tests.reports_support import create_report, run_report, seed, seed_traits, workspace_id

BASE = datetime(2024, 5, 1, tzinfo=UTC)
START, END = BASE + timedelta(days=2), BASE + timedelta(days=16)
ACTORS = [f"u{i}" for i in range(14)] + ["o'brien, \"x\"", "anon:z1", "anon:z2", "anon:u1"]
PLANS = ["x", "y", 1, None, "missing"]  # "missing": no plan property at all
TRAITS = {"u0": "pro", "u1": "free", "u2": "", "u3": 5, "o'brien, \"x\"": "free", "u4": None}
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _text(value: object) -> str | None:
    """A JSON value as PostgreSQL's #>> renders it."""
    return None if value is None else value if isinstance(value, str) else json.dumps(value)


def _ratio(part: int, whole: int) -> float | None:
    return float((Decimal(part) / Decimal(whole)).quantize(Decimal("0.0001"), ROUND_HALF_UP)) if whole else None


@pytest.fixture
async def data(client, make_key, pool, workspace, database_url):
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    rnd = random.Random(11)
    # Distinct times, so that "the entry event" and "the earliest step" are never a tie.
    minutes = rnd.sample(range(20 * 24 * 60), 900)
    events = []
    for m in minutes:
        plan = rnd.choice(PLANS)
        events.append((rnd.choice(["a", "a", "b", "b", "c", "d"]), rnd.choice(ACTORS),
                       BASE + timedelta(minutes=m), {} if plan == "missing" else {"plan": plan, "n": m}))
    await seed(pool, ws, [(name, actor, at.isoformat(), props) for name, actor, at, props in events])
    await seed_traits(pool, ws, {u: {"plan": v} for u, v in TRAITS.items()})
    await client.app[MIRROR].catch_up()
    return ws, events


def expected_funnel(events: list, steps: list[str], window: timedelta, group: str | None) -> set:
    by_actor: dict[str, list] = {}
    for name, actor, at, props in events:
        by_actor.setdefault(actor, []).append((at, name, props))
    reached: Counter = Counter()
    groups = set()
    for actor, evs in by_actor.items():
        entries = sorted((at, props) for at, name, props in evs if name == steps[0] and START <= at <= END)
        if not entries:
            continue
        t1, props = entries[0]
        g = (_text(props.get("plan")) if group == "properties"
             else _text(TRAITS.get(actor)) if group == "traits" else None)
        groups.add(g)
        level, prev = 1, t1
        for step in steps[1:]:
            later = [at for at, name, _ in evs if name == step and prev < at <= t1 + window]
            if not later:
                break
            level, prev = level + 1, min(later)
        for k in range(level):
            reached[(g, k)] += 1
    return {(k + 1, steps[k], g, reached[(g, k)]) for g in groups for k in range(len(steps))}


def expected_retention(events: list, start_event: str, return_event: str, periods: int) -> list:
    day = timedelta(days=1)
    firsts: dict[str, datetime] = {}
    for name, actor, at, _ in events:
        if name == start_event and at <= END:
            firsts[actor] = min(firsts.get(actor, at), at)
    cohorts = {a: t.replace(hour=0, minute=0, second=0, microsecond=0) for a, t in firsts.items() if t >= START}
    returned = {(cohorts[actor], (at.replace(hour=0, minute=0, second=0, microsecond=0) - cohorts[actor]) // day, actor)
                for name, actor, at, _ in events if name == return_event and actor in cohorts}
    sizes = Counter(cohorts.values())
    counts = Counter((c, k) for c, k, _ in returned if 1 <= k <= periods)
    return [(c, n, [_ratio(counts[(c, k)], n) for k in range(1, periods + 1)]) for c, n in sorted(sizes.items())]


async def reports(client, pool, ws: int) -> dict:
    db = client.app[ANALYTICS]
    out = {}
    async with pool.acquire() as conn:
        for steps in (["a", "b", "c"], ["a", "b", "a", "c"], ["b", "d"]):
            for group, limit in ((None, None), ("properties", None), ("traits", None), ("properties", 2),
                                 ("traits", 2), ("traits", 1000)):
                out[("funnel", tuple(steps), group, limit)] = await report_queries.funnel(
                    db, conn, ws, "live", events=steps, start=START, end=END, window_days=2, group_kind=group,
                    group_path=["plan"], group_limit=limit)
        for start_event, return_event in (("a", "b"), ("c", "c")):
            out[("retention", start_event, return_event)] = await report_queries.retention(
                db, ws, "live", start_event=start_event, return_event=return_event, start=START, end=END,
                period="day", periods=5, now=NOW)
        for group in (None, "properties", "traits"):
            for limit in (None, 2, 1000):  # no cap (the query without the ranking), a fold, every group kept
                out[("volume", group, limit)] = await report_queries.event_volume(
                    db, conn, ws, "live", events=["a", "d"], start=START, end=END, interval="day",
                    group_kind=group, group_path=["plan"], group_limit=limit)
    return out


def check(out: dict, events: list) -> None:
    for key, rows in out.items():
        if key[0] == "funnel":
            _, steps, group, limit = key
            expected = expected_funnel(events, list(steps), timedelta(days=2), group)
            entered = {g: n for step, _, g, n in expected if step == 1 and g is not None}
            rest = sorted(entered, key=lambda g: (-entered[g], g))[limit:] if limit else []
            folded = Counter()
            for step, event, g, n in expected:
                folded[(step, event, "(other)" if g in rest else g)] += n
            assert {(r.step, r.event, r.grp): r.users for r in rows.rows} == dict(folded), key
            assert rows.other_groups == len(rest), key
            if limit == 2:
                assert rest, key  # the data has more than two groups: something was folded
            for r in rows.rows:  # conversions follow from the counts
                first = next(f.users for f in rows.rows if f.grp == r.grp and f.step == 1)
                assert r.from_first == _ratio(r.users, first)
        elif key[0] == "retention":
            _, start_event, return_event = key
            assert [(r.cohort, r.users, r.shares) for r in rows] == expected_retention(
                events, start_event, return_event, 5), key
        else:
            _, group, limit = key
            expected = Counter()
            for name, actor, at, props in events:
                if name in ("a", "d") and START <= at <= END:
                    g = (_text(props.get("plan")) if group == "properties"
                         else _text(TRAITS.get(actor)) if group == "traits" else None)
                    expected[(at.replace(hour=0, minute=0, second=0, microsecond=0), name, g)] += 1
            totals = Counter()
            for (_, _, g), n in expected.items():
                if g is not None:
                    totals[g] += n
            rest = sorted(totals, key=lambda g: (-totals[g], g))[limit:] if group and limit else []
            folded = Counter()
            for (day, name, g), n in expected.items():
                folded[(day, name, "(other)" if g in rest else g)] += n
            assert {(r.bucket, r.event, r.grp): r.n for r in rows.rows if r.n} == dict(folded), key
            assert rows.other_groups == len(rest), key
            if group and limit == 2:
                assert rest, key  # the data has more than two groups: something was folded


async def test_reports_match_a_direct_computation_and_ignore_copied_events(client, pool, data):
    ws, events = data
    before = await reports(client, pool, ws)
    check(before, events)
    assert sum(r.users for r in before[("funnel", ("a", "b", "c"), None, None)].rows if r.step == 3) > 0
    assert any(r.shares[0] for r in before[("retention", "a", "b")])
    # What a crash between the store's insert and the outbox delete leaves behind: the rows again, twice.
    async with pool.acquire() as conn:
        rows = (await analytics_mirror.workspace_events_csv(conn, ws)).splitlines(keepends=True)
    assert len(rows) == len(events)
    await analytics_mirror.write_events(client.app[ANALYTICS], b"".join(rows))
    await analytics_mirror.write_events(client.app[ANALYTICS], b"".join(rows[: len(rows) // 2]))
    assert await reports(client, pool, ws) == before


async def test_trait_values_with_separators_and_no_traits(client, make_key, pool, workspace, database_url):
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    at = "2024-05-03T10:00:00Z"
    await seed(pool, ws, [("a", "p,q", at), ("a", "r'", at), ("a", "s", at), ("a", "anon:p,q", at)])
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    day = datetime(2024, 5, 3, tzinfo=UTC)

    async def volume() -> dict:
        async with pool.acquire() as conn:
            rows = await report_queries.event_volume(db, conn, ws, "live", events=["a"], start=day,
                                                     end=day + timedelta(hours=23), interval="day",
                                                     group_kind="traits", group_path=["tier"])
        return {r.grp: r.n for r in rows.rows}

    assert await volume() == {None: 4}  # nobody has the trait
    await seed_traits(pool, ws, {"p,q": {"tier": "a\tb, c"}, "r'": {"tier": ""}, "s": {"tier": "a\tb, c"}})
    assert await volume() == {"a\tb, c": 2, "": 1, None: 1}


async def test_a_store_without_the_actor_key_gets_it_with_the_same_answers(client, pool, data):
    ws, events = data
    db = client.app[ANALYTICS]
    before = await reports(client, pool, ws)
    await db.command(f"ALTER TABLE {db.local_table('keyed_events')} DROP COLUMN actor_key")  # as before it
    with pytest.raises(Exception, match="actor_key"):
        await reports(client, pool, ws)
    await asyncio.to_thread(ensure_schema, db)
    assert await reports(client, pool, ws) == before
    check(before, events)
    kind = await db.query("SELECT default_kind FROM system.columns WHERE database = {d:String} "
                          "AND table = 'keyed_events' AND name = 'actor_key'", {"d": db.database})
    assert kind == [("MATERIALIZED",)]


async def test_a_user_id_that_looks_anonymous_keeps_its_trait(client, make_key, pool, workspace, database_url):
    """A user id "anon:q" and the anonymous id "q" are one actor "anon:q" (one actor_key): event volume
    goes by the user id, so only the user's event has the user's trait; a funnel, as before, gives that
    actor no trait."""
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    at = datetime(2024, 5, 3, 10, tzinfo=UTC)
    rows = [EventRow(f"evt_{i}_{secrets.token_hex(6)}", ws, "live", name, at + timedelta(minutes=i), at,
                     user_id=user, anonymous_id=anon, properties={})
            for i, (name, user, anon) in enumerate([("a", "anon:q", None), ("a", None, "q"), ("b", "anon:q", None),
                                                    ("a", "r", None)])]
    async with pool.acquire() as conn:
        await event_store.ensure_partitions(conn, {at})
        await event_store.copy_events(conn, rows)
    await seed_traits(pool, ws, {"anon:q": {"tier": "gold"}, "r": {"tier": "gold"}})
    await client.app[MIRROR].catch_up()
    db = client.app[ANALYTICS]
    async with pool.acquire() as conn:
        volume = await report_queries.event_volume(db, conn, ws, "live", events=["a"], start=at,
                                                   end=at + timedelta(hours=1), interval="day", group_kind="traits",
                                                   group_path=["tier"])
        funnel = await report_queries.funnel(db, conn, ws, "live", events=["a", "b"], start=at,
                                             end=at + timedelta(hours=1), window_days=1, group_kind="traits",
                                             group_path=["tier"])
    assert {r.grp: r.n for r in volume.rows} == {"gold": 2, None: 1}
    assert [(r.grp, r.step, r.users) for r in funnel.rows] == [("gold", 1, 1), ("gold", 2, 0), (None, 1, 1),
                                                          (None, 2, 1)]


async def test_trait_groups_past_the_limit_fold_by_count_then_value_in_code_point_order(client, make_key, pool,
                                                                                        workspace, database_url):
    """Equal counts rank by value as Python orders strings (code points: "B" < "E" < "b" < "é", where a
    language's collation puts "b" first), with user ids and values outside ASCII."""
    await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    at = "2024-05-03T10:00:00Z"
    users = {"ü1": "b", "ü2": "B", "ü3": "é", "ü4": "E", "ü5": "E"}
    await seed(pool, ws, [("a", u, at) for u in users] + [("a", "nobody", at)])
    await seed_traits(pool, ws, {u: {"tier": v} for u, v in users.items()})
    await client.app[MIRROR].catch_up()
    day = datetime(2024, 5, 3, tzinfo=UTC)
    async with pool.acquire() as conn:
        volume = await report_queries.event_volume(client.app[ANALYTICS], conn, ws, "live", events=["a"], start=day,
                                                   end=day + timedelta(hours=23), interval="day",
                                                   group_kind="traits", group_path=["tier"], group_limit=2)
    assert {r.grp: r.n for r in volume.rows} == {"E": 2, "B": 1, report_queries.OTHER: 2, None: 1}
    assert volume.other_groups == 2


async def test_a_tie_of_entry_events_takes_the_property_of_the_lower_event_id(client, make_key, pool, workspace,
                                                                              database_url):
    """Two step-1 events of one user at the same instant with different properties: a funnel by the property
    enters the user with the event of the lower id (bytewise; ids are made in order), whatever part of the
    store holds it. Each insert below holds one user's lower id and the other user's higher one, so a store
    taking the entry from whichever part it reads first puts one of the two users in the wrong group."""
    key = await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    db = client.app[ANALYTICS]
    at = datetime(2024, 5, 3, 10, tzinfo=UTC)
    ids = [new_id("evt") for _ in range(4)]
    assert ids == sorted(ids)

    def row(event_id: str, user: str, plan: str) -> EventRow:
        return EventRow(event_id, ws, "live", "a", at, at, user_id=user, properties={"plan": plan})

    keyed = db.local_table("keyed_events")
    await db.command(f"SYSTEM STOP MERGES {keyed}")  # the two inserts stay two parts
    try:
        for rows in ([row(ids[0], "p", "first"), row(ids[3], "q", "second")],
                     [row(ids[2], "p", "second"), row(ids[1], "q", "first")]):
            async with pool.acquire() as conn:
                await event_store.ensure_partitions(conn, {at})
                await event_store.copy_events(conn, rows)
            await client.app[MIRROR].catch_up()
        parts = await db.query("SELECT count() FROM system.parts WHERE active AND database = {d:String} "
                               "AND table = 'keyed_events' AND partition = '202405'", {"d": db.database})
        assert parts[0][0] >= 2
        report = await create_report(client, key, {"name": "tie", "type": "funnel", "config": {
            "events": ["a", "b"], "group_by": "properties.plan",
            "from": "2024-05-03T00:00:00Z", "to": "2024-05-04T00:00:00Z"}})
        for _ in range(3):  # the same answer each time
            body = await run_report(client, key, report["id"])
            assert [row[:4] for row in body["rows"]] == [[1, "a", "first", 2], [2, "b", "first", 0]]
    finally:
        await db.command(f"SYSTEM START MERGES {keyed}")


async def test_a_tie_of_entry_events_goes_to_the_bytewise_lower_id_wherever_the_ids_differ(
        client, make_key, pool, workspace, database_url):
    """Tied step-1 events whose ids differ only in their last hex digit, only in their first, or in a way
    that a little-endian reading of the id's bytes orders the other way round (a low first byte against a
    high last byte): each user enters with the property of the id that is lower bytewise, as ids compare
    in PostgreSQL and in storage/ids.py's order. Each insert holds some users' lower ids and others' higher
    (of the two users whose ids differ in the last digit alone, one each), so a key that ties them fails too."""
    key = await make_key("read,write")
    ws = await workspace_id(database_url, workspace)
    db = client.app[ANALYTICS]
    at = datetime(2024, 5, 3, 10, tzinfo=UTC)
    pairs = {  # user: (lower id, higher id), bytewise
        "last": ("evt_" + "7" * 31 + "0", "evt_" + "7" * 31 + "f"),
        "first": ("evt_0" + "f" * 31, "evt_f" + "0" * 31),
        "digit": ("evt_" + "0" * 31 + "9", "evt_" + "0" * 31 + "a"),
        "endian": ("evt_" + "00" * 15 + "ff", "evt_01" + "00" * 15),
        "middle": ("evt_" + "5" * 15 + "4" + "9" * 16, "evt_" + "5" * 15 + "5" + "0" * 16),
        "last, other part": ("evt_" + "8" * 31 + "1", "evt_" + "8" * 31 + "2"),
    }
    for low, high in pairs.values():
        assert len(low) == len(high) == 36 and low < high

    def row(event_id: str, user: str, plan: str) -> EventRow:
        return EventRow(event_id, ws, "live", "a", at, at, user_id=user, properties={"plan": plan})

    users = list(pairs)
    keyed = db.local_table("keyed_events")
    await db.command(f"SYSTEM STOP MERGES {keyed}")  # the two inserts stay two parts
    try:
        inserts = ([row(pairs[u][0], u, "lower") if i % 2 else row(pairs[u][1], u, "higher")
                    for i, u in enumerate(users)],
                   [row(pairs[u][1], u, "higher") if i % 2 else row(pairs[u][0], u, "lower")
                    for i, u in enumerate(users)])
        for rows in inserts:
            async with pool.acquire() as conn:
                await event_store.ensure_partitions(conn, {at})
                await event_store.copy_events(conn, rows)
            await client.app[MIRROR].catch_up()
        report = await create_report(client, key, {"name": "ties", "type": "funnel", "config": {
            "events": ["a", "b"], "group_by": "properties.plan",
            "from": "2024-05-03T00:00:00Z", "to": "2024-05-04T00:00:00Z"}})
        for _ in range(3):
            body = await run_report(client, key, report["id"])
            assert [row[:4] for row in body["rows"]] == [[1, "a", "lower", len(pairs)], [2, "b", "lower", 0]]
    finally:
        await db.command(f"SYSTEM START MERGES {keyed}")
