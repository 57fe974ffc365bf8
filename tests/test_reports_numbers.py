"""Report results against hand-computed fixtures: event volume, funnel order and window, retention."""

from __future__ import annotations

import pytest

from tests.reports_support import create_report, run_report, seed, seed_traits, workspace_id

D1, D2, D3 = "2024-03-01T00:00:00.000Z", "2024-03-02T00:00:00.000Z", "2024-03-03T00:00:00.000Z"
RANGE = {"from": "2024-03-01T00:00:00Z", "to": "2024-03-03T23:59:59Z"}


@pytest.fixture
async def ctx(client, make_key, pool, workspace, database_url):
    key = await make_key("read,write")
    other_ws = f"{workspace}-other"
    await make_key("read", workspace_name=other_ws)
    return key, await workspace_id(database_url, workspace), await workspace_id(database_url, other_ws)


@pytest.fixture
async def volume_data(ctx, pool):
    key, ws, other = ctx
    await seed(pool, ws, [
        ("signup", "u1", "2024-03-01T10:00:00Z", {"plan": "free"}),
        ("signup", "u2", "2024-03-01T11:30:00Z", {"plan": "pro"}),
        ("signup", "u3", "2024-03-02T09:00:00Z", {"plan": "free"}),
        ("purchase", "u1", "2024-03-02T12:00:00Z", {"plan": "free"}),
        ("pageview", "u1", "2024-03-02T12:00:00Z"),
        ("signup", "u9", "2024-03-04T00:00:00Z"),  # after `to`
    ])
    await seed(pool, ws, [("signup", "u1", "2024-03-01T10:00:00Z")], env="test")
    await seed(pool, other, [("signup", "x", "2024-03-01T10:00:00Z")])
    await seed_traits(pool, ws, {"u1": {"plan": "enterprise"}, "u2": {"plan": "pro"}})
    return key


async def test_event_volume_per_day_with_empty_buckets(client, volume_data):
    report = await create_report(client, volume_data, {
        "name": "Signups", "type": "event_volume", "config": {"events": ["signup", "purchase"], **RANGE}})
    result = await run_report(client, volume_data, report["id"])
    assert result["columns"] == ["bucket", "event", "count"]
    assert result["rows"] == [
        [D1, "purchase", 0], [D1, "signup", 2],
        [D2, "purchase", 1], [D2, "signup", 1],
        [D3, "purchase", 0], [D3, "signup", 0],
    ]
    assert result["generated_at"].endswith("Z")


async def test_event_volume_weekly(client, volume_data):
    report = await create_report(client, volume_data, {
        "name": "Weekly", "type": "event_volume",
        "config": {"events": ["signup", "purchase"], "interval": "week", **RANGE}})
    result = await run_report(client, volume_data, report["id"])
    # 2024-03-01 is a Friday: ISO weeks start on Monday 2024-02-26.
    assert result["rows"] == [["2024-02-26T00:00:00.000Z", "purchase", 1], ["2024-02-26T00:00:00.000Z", "signup", 3]]


async def test_event_volume_grouped_by_event_property(client, volume_data):
    report = await create_report(client, volume_data, {
        "name": "By plan", "type": "event_volume",
        "config": {"events": ["signup", "purchase"], "group_by": "properties.plan", **RANGE}})
    result = await run_report(client, volume_data, report["id"])
    assert result["columns"] == ["bucket", "event", "properties.plan", "count"]
    assert result["rows"] == [
        [D1, "purchase", "free", 0], [D1, "signup", "free", 1], [D1, "signup", "pro", 1],
        [D2, "purchase", "free", 1], [D2, "signup", "free", 1], [D2, "signup", "pro", 0],
        [D3, "purchase", "free", 0], [D3, "signup", "free", 0], [D3, "signup", "pro", 0],
    ]


async def test_event_volume_grouped_by_user_trait(client, volume_data):
    report = await create_report(client, volume_data, {
        "name": "By trait", "type": "event_volume",
        "config": {"events": ["signup", "purchase"], "group_by": "traits.plan", **RANGE}})
    result = await run_report(client, volume_data, report["id"])
    # u1's trait is enterprise (its event property said free); u3 has no profile.
    assert result["rows"][:8] == [
        [D1, "purchase", "enterprise", 0], [D1, "signup", "enterprise", 1], [D1, "signup", "pro", 1],
        [D1, "signup", None, 0],
        [D2, "purchase", "enterprise", 1], [D2, "signup", "enterprise", 0], [D2, "signup", "pro", 0],
        [D2, "signup", None, 1],
    ]
    assert [r[3] for r in result["rows"][8:]] == [0, 0, 0, 0]



@pytest.mark.parametrize("group_by", ["properties.plan", "traits.plan"])
async def test_grouped_event_volume_covers_every_bucket_of_every_event(client, volume_data, group_by):
    """An event with no group in the range (none at all, or none of that name) still has a row in every
    bucket, in the null group with 0, so a chart client gets the same buckets and events as ungrouped, and the
    grouped counts of each (bucket, event) add up to the ungrouped one. An empty range gave no rows at all."""
    config = {"events": ["signup", "purchase", "refund"], **RANGE}
    plain = await create_report(client, volume_data, {"name": "All", "type": "event_volume", "config": config})
    grouped = await create_report(client, volume_data, {
        "name": "By", "type": "event_volume", "config": {**config, "group_by": group_by}})
    totals = {}
    for bucket, event, _, n in (await run_report(client, volume_data, grouped["id"]))["rows"]:
        totals[bucket, event] = totals.get((bucket, event), 0) + n
    assert totals == {(b, e): n for b, e, n in (await run_report(client, volume_data, plain["id"]))["rows"]}
    rows = (await run_report(client, volume_data, grouped["id"]))["rows"]
    assert [r for r in rows if r[1] == "refund"] == [[D1, "refund", None, 0], [D2, "refund", None, 0],
                                                      [D3, "refund", None, 0]]

    empty = {**config, "from": "2023-01-01T00:00:00Z", "to": "2023-01-02T00:00:00Z", "group_by": group_by}
    report = await create_report(client, volume_data, {"name": "None", "type": "event_volume", "config": empty})
    assert (await run_report(client, volume_data, report["id"]))["rows"] == [
        [f"2023-01-0{d}T00:00:00.000Z", e, None, 0] for d in (1, 2) for e in ("purchase", "refund", "signup")]

@pytest.fixture
async def funnel_data(ctx, pool):
    key, ws, _ = ctx
    await seed(pool, ws, [
        # a: completes in order inside the 2-day window.
        ("view", "a", "2024-03-01T10:00:00Z", {"source": "ads"}), ("signup", "a", "2024-03-01T11:00:00Z"),
        ("purchase", "a", "2024-03-02T09:00:00Z"),
        # b: purchases before signing up, so stops at step 2.
        ("view", "b", "2024-03-01T10:00:00Z", {"source": "seo"}), ("purchase", "b", "2024-03-01T10:30:00Z"),
        ("signup", "b", "2024-03-01T11:00:00Z"),
        # c: signs up after the window closed.
        ("view", "c", "2024-03-02T00:00:00Z", {"source": "ads"}), ("signup", "c", "2024-03-05T00:00:00Z"),
        # d: never viewed: not in the funnel.
        ("signup", "d", "2024-03-02T00:00:00Z"), ("purchase", "d", "2024-03-02T01:00:00Z"),
        # e: completes one hour before the window ends (anonymous visitor).
        ("view", "anon:e", "2024-03-03T12:00:00Z", {"source": "ads"}), ("signup", "anon:e", "2024-03-03T12:00:01Z"),
        ("purchase", "anon:e", "2024-03-05T11:00:00Z"),
        # f: viewed only before the range.
        ("view", "f", "2024-02-28T10:00:00Z"), ("signup", "f", "2024-03-01T10:00:00Z"),
        # g: entered at the first view; the second view does not reopen the window.
        ("view", "g", "2024-03-01T08:00:00Z"), ("view", "g", "2024-03-06T08:00:00Z"),
        ("signup", "g", "2024-03-07T08:00:00Z"),
    ])
    await seed_traits(pool, ws, {"a": {"plan": "pro"}, "b": {"plan": "free"}, "c": {"plan": "free"},
                                 "g": {"company": "x"}})
    return key


FUNNEL = {"events": ["view", "signup", "purchase"], "conversion_window_days": 2,
          "from": "2024-03-01T00:00:00Z", "to": "2024-03-10T00:00:00Z"}


async def test_funnel_order_and_window(client, funnel_data):
    report = await create_report(client, funnel_data, {"name": "F", "type": "funnel", "config": FUNNEL})
    result = await run_report(client, funnel_data, report["id"])
    assert result["columns"] == ["step", "event", "users", "conversion_from_first", "conversion_from_previous"]
    # Entered: a, b, c, e, g. Step 2: a, b, e. Step 3: a, e.
    assert result["rows"] == [
        [1, "view", 5, 1.0, 1.0],
        [2, "signup", 3, 0.6, 0.6],
        [3, "purchase", 2, 0.4, 0.6667],
    ]


async def test_funnel_grouped_by_trait(client, funnel_data):
    report = await create_report(client, funnel_data, {
        "name": "F", "type": "funnel", "config": {**FUNNEL, "group_by": "traits.plan"}})
    result = await run_report(client, funnel_data, report["id"])
    assert result["columns"] == ["step", "event", "traits.plan", "users", "conversion_from_first",
                                 "conversion_from_previous"]
    # free: b, c. pro: a. No plan: e (anonymous) and g (no plan trait).
    assert result["rows"] == [
        [1, "view", "free", 2, 1.0, 1.0], [2, "signup", "free", 1, 0.5, 0.5], [3, "purchase", "free", 0, 0.0, 0.0],
        [1, "view", "pro", 1, 1.0, 1.0], [2, "signup", "pro", 1, 1.0, 1.0], [3, "purchase", "pro", 1, 1.0, 1.0],
        [1, "view", None, 2, 1.0, 1.0], [2, "signup", None, 1, 0.5, 0.5], [3, "purchase", None, 1, 0.5, 1.0],
    ]


async def test_funnel_grouped_by_entry_event_property(client, funnel_data):
    report = await create_report(client, funnel_data, {
        "name": "F", "type": "funnel", "config": {**FUNNEL, "group_by": "properties.source"}})
    result = await run_report(client, funnel_data, report["id"])
    # ads: a, c, e. seo: b. None: g.
    assert result["rows"] == [
        [1, "view", "ads", 3, 1.0, 1.0], [2, "signup", "ads", 2, 0.6667, 0.6667],
        [3, "purchase", "ads", 2, 0.6667, 1.0],
        [1, "view", "seo", 1, 1.0, 1.0], [2, "signup", "seo", 1, 1.0, 1.0], [3, "purchase", "seo", 0, 0.0, 0.0],
        [1, "view", None, 1, 1.0, 1.0], [2, "signup", None, 0, 0.0, 0.0], [3, "purchase", None, 0, 0.0, None],
    ]


@pytest.mark.parametrize("group_by", ["traits.plan", "properties.source"])
async def test_a_grouped_funnel_without_users_keeps_its_steps(client, funnel_data, group_by):
    """No user entered in the range: the grouped funnel has the ungrouped one's step rows, in the null group
    (it gave no rows at all, leaving a chart client no steps to draw)."""
    empty = {**FUNNEL, "from": "2023-01-01T00:00:00Z", "to": "2023-01-02T00:00:00Z"}
    plain = await create_report(client, funnel_data, {"name": "F", "type": "funnel", "config": empty})
    grouped = await create_report(client, funnel_data, {
        "name": "G", "type": "funnel", "config": {**empty, "group_by": group_by}})
    expected = [[step, event, None, *rest] for step, event, *rest in
                (await run_report(client, funnel_data, plain["id"]))["rows"]]
    assert [r[:4] for r in expected] == [[1, "view", None, 0], [2, "signup", None, 0], [3, "purchase", None, 0]]
    assert (await run_report(client, funnel_data, grouped["id"]))["rows"] == expected


async def test_retention_cohorts(client, ctx, pool):
    key, ws, _ = ctx
    await seed(pool, ws, [
        ("signup", "u1", "2024-03-01T10:00:00Z"), ("login", "u1", "2024-03-02T08:00:00Z"),
        ("login", "u1", "2024-03-04T08:00:00Z"),
        ("signup", "u2", "2024-03-01T23:00:00Z"), ("login", "u2", "2024-03-01T23:30:00Z"),  # same day: not a return
        ("login", "u2", "2024-03-03T01:00:00Z"),
        ("signup", "u3", "2024-03-02T10:00:00Z"), ("login", "u3", "2024-03-03T10:00:00Z"),
        ("login", "u3", "2024-03-03T11:00:00Z"),
        ("signup", "u4", "2024-02-28T10:00:00Z"), ("signup", "u4", "2024-03-01T10:00:00Z"),  # first signup earlier
        ("login", "u4", "2024-03-02T10:00:00Z"),
        ("signup", "u5", "2024-03-03T10:00:00Z"), ("login", "u5", "2024-03-04T10:00:00Z"),  # after the range
        ("signup", "u6", "2024-03-02T10:00:00Z"), ("login", "u6", "2024-03-06T10:00:00Z"),  # beyond 3 periods
    ])
    report = await create_report(client, key, {"name": "R", "type": "retention", "config": {
        "start_event": "signup", "return_event": "login", "periods": 3,
        "from": "2024-03-01T00:00:00Z", "to": "2024-03-02T23:59:59Z"}})
    assert report["config"]["period"] == "day"
    result = await run_report(client, key, report["id"])
    assert result["columns"] == ["cohort", "users", "day_1", "day_2", "day_3"]
    assert result["rows"] == [[D1, 2, 0.5, 0.5, 0.5], [D2, 2, 0.5, 0.0, 0.0]]


async def test_retention_weekly_leaves_future_periods_empty(client, ctx, pool):
    key, ws, _ = ctx
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    last_week = (now - timedelta(days=7)).isoformat()
    await seed(pool, ws, [("signup", "w1", last_week), ("signup", "w2", last_week),
                          ("login", "w1", now.isoformat())])
    report = await create_report(client, key, {"name": "W", "type": "retention", "config": {
        "start_event": "signup", "return_event": "login", "period": "week", "periods": 2}})
    result = await run_report(client, key, report["id"])
    assert result["columns"] == ["cohort", "users", "week_1", "week_2"]
    [(cohort, users, week_1, week_2)] = result["rows"]
    start = (now - timedelta(days=7)).date()
    assert cohort == f"{start - timedelta(days=start.weekday())}T00:00:00.000Z"
    assert (users, week_1, week_2) == (2, 0.5, None)
