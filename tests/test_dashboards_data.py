"""GET /v1/dashboards/{id}/charts/{chart_id}/data: bucketed counts, filters, group_by, totals, funnels."""

import pytest

from tests.conftest import bearer

DAY1, DAY3 = "2025-03-01", "2025-03-03"
RANGE = "from=2025-03-01T00:00:00Z&to=2025-03-03T23:59:59Z"

SIGNUPS = [
    {"event": "signup", "user_id": "u1", "timestamp": f"{DAY1}T09:15:00Z",
     "properties": {"plan": "pro", "country": "US", "seats": 5}},
    {"event": "signup", "user_id": "u2", "timestamp": f"{DAY1}T09:45:00Z",
     "properties": {"plan": "free", "country": "FR", "seats": 1}},
    {"event": "signup", "user_id": "u3", "timestamp": f"{DAY1}T11:00:00Z",
     "properties": {"plan": "pro", "country": "US", "seats": "12"}},
    {"event": "signup", "user_id": "u4", "timestamp": f"{DAY3}T08:00:00Z",
     "properties": {"plan": "Enterprise", "country": "DE", "seats": "many"}},
    {"event": "signup", "anonymous_id": "a1", "timestamp": f"{DAY3}T23:00:00Z", "properties": {}},
    # Not the chart's event, and outside the range: never counted.
    {"event": "login", "user_id": "u1", "timestamp": f"{DAY1}T10:00:00Z", "properties": {"plan": "pro"}},
    {"event": "signup", "user_id": "u9", "timestamp": "2025-02-28T23:59:59Z", "properties": {"plan": "pro"}},
    {"event": "signup", "user_id": "u9", "timestamp": "2025-03-04T00:00:00Z", "properties": {"plan": "pro"}},
]


async def _ingest(client, key, events):
    resp = await client.post("/v1/events/batch", headers=bearer(key), json={"events": events})
    body = await resp.json()
    assert resp.status == 200 and body["failed"] == 0, body


def _rows_read(store, monkeypatch) -> list[int]:
    """How many rows each of the store's reads of keyed events hands the process, from now on."""
    read: list[int] = []
    real = store.query_sync

    def counted(sql, *args, **kwargs):
        rows = real(sql, *args, **kwargs)
        if "keyed_events" in sql:
            read.append(len(rows))
        return rows

    monkeypatch.setattr(store, "query_sync", counted)
    return read


async def _data(client, key, chart, query=RANGE):
    made = await (await client.post("/v1/dashboards", headers=bearer(key),
                                    json={"name": "d", "charts": [chart]})).json()
    resp = await client.get(f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data?{query}",
                            headers=bearer(key))
    assert resp.status == 200, await resp.text()
    return await resp.json()


def _values(body):
    return {s["name"]: [p["value"] for p in s["points"]] for s in body["series"]}


@pytest.fixture
async def key(client, make_key):
    key = await make_key("read,write")
    await _ingest(client, key, SIGNUPS)
    return key


def _line(**extra):
    return {"title": "t", "type": "line", "event": "signup", **extra}


async def test_daily_counts_with_zero_buckets(client, key):
    body = await _data(client, key, _line())
    assert body["type"] == "line" and body["interval"] == "day"
    assert body["from"] == "2025-03-01T00:00:00.000Z" and body["to"] == "2025-03-03T23:59:59.000Z"
    assert body["series"] == [{"name": "signup", "points": [
        {"timestamp": "2025-03-01T00:00:00.000Z", "value": 3},
        {"timestamp": "2025-03-02T00:00:00.000Z", "value": 0},
        {"timestamp": "2025-03-03T00:00:00.000Z", "value": 2},
    ]}]


async def test_hourly_buckets(client, key):
    body = await _data(client, key, _line(type="bar"),
                       "from=2025-03-01T09:00:00Z&to=2025-03-01T11:30:00Z&interval=hour")
    assert [p["timestamp"][11:16] for p in body["series"][0]["points"]] == ["09:00", "10:00", "11:00"]
    assert _values(body) == {"signup": [2, 0, 1]}


@pytest.mark.parametrize(("operator", "value", "expected"), [
    ("eq", "pro", [2, 0, 0]),
    ("neq", "pro", [1, 0, 2]),  # events without the property are "not equal"
    ("contains", "PRO", [2, 0, 0]),  # case-insensitive
    ("contains", "terp", [0, 0, 1]),
])
async def test_text_filters(client, key, operator, value, expected):
    body = await _data(client, key, _line(filters=[{"property": "plan", "operator": operator, "value": value}]))
    assert _values(body) == {"signup": expected}


@pytest.mark.parametrize(("operator", "value", "expected"), [
    ("gt", 2, [2, 0, 0]),  # 5 and "12"; "many" and missing never match
    ("gt", 12, [0, 0, 0]),
    ("lt", 5.5, [2, 0, 0]),  # 5 and 1
    ("lt", 1, [0, 0, 0]),
])
async def test_numeric_filters(client, key, operator, value, expected):
    body = await _data(client, key, _line(filters=[{"property": "seats", "operator": operator, "value": value}]))
    assert _values(body) == {"signup": expected}


async def test_filters_combine_and_numbers_compare_as_text_for_eq(client, key):
    body = await _data(client, key, _line(filters=[
        {"property": "plan", "operator": "eq", "value": "pro"},
        {"property": "seats", "operator": "eq", "value": 5}]))
    assert _values(body) == {"signup": [1, 0, 0]}


async def test_an_eq_filter_on_a_number_beyond_64_bits_matches_it(client, key):
    """Such numbers are stored (any JSON number round-trips), so a chart may filter on one: its chart data was a
    500 (the filter value's JSON text could not be written), and now compares as any number does, by its text."""
    huge = 123456789012345678901234567890
    await _ingest(client, key, [{"event": "signup", "user_id": "u8", "timestamp": f"{DAY1}T12:00:00Z",
                                 "properties": {"order": huge}}])
    for operator, expected in (("eq", [1, 0, 0]), ("neq", [3, 0, 2])):
        body = await _data(client, key, _line(filters=[{"property": "order", "operator": operator, "value": huge}]))
        assert _values(body) == {"signup": expected}, operator


async def test_a_float_filter_value_matches_the_number_sent_as_it(client, make_key):
    """price 10.0 sent as JSON 10.0: a filter eq 10.0 matched nothing (the filter's text "10.0" against the
    store's "10"); numbers the store writes in exponent form (1e-7) alike. A string property keeps matching
    its own text."""
    key = await make_key("read,write")
    prices = [10.0, 10, 0.0000001, "10.0", 2.5]
    await _ingest(client, key, [{"event": "signup", "user_id": f"u{i}", "timestamp": f"{DAY1}T12:00:00Z",
                                 "properties": {"price": p}} for i, p in enumerate(prices)])
    for operator, value, expected in (("eq", 10.0, 3), ("eq", 10, 2), ("neq", 10.0, 2), ("eq", 1e-7, 1),
                                      ("eq", 2.5, 1), ("eq", "10.0", 1)):
        body = await _data(client, key, _line(filters=[{"property": "price", "operator": operator, "value": value}]))
        assert _values(body) == {"signup": [expected, 0, 0]}, (operator, value)


async def test_group_by_splits_series(client, key):
    body = await _data(client, key, _line(group_by="plan"))
    assert [s["name"] for s in body["series"]] == ["pro", "(none)", "Enterprise", "free"]
    assert _values(body) == {"pro": [2, 0, 0], "(none)": [0, 0, 1], "Enterprise": [0, 0, 1], "free": [1, 0, 0]}


async def test_group_by_with_filter(client, key):
    body = await _data(client, key, _line(group_by="country",
                                          filters=[{"property": "plan", "operator": "neq", "value": "free"}]))
    assert _values(body) == {"US": [2, 0, 0], "(none)": [0, 0, 1], "DE": [0, 0, 1]}


async def test_pie_and_table_give_grouped_totals(client, key):
    pie = await _data(client, key, {"title": "t", "type": "pie", "event": "signup", "group_by": "country"})
    assert pie["series"] == [
        {"name": "US", "points": [{"timestamp": "2025-03-01T00:00:00.000Z", "value": 2}]},
        {"name": "(none)", "points": [{"timestamp": "2025-03-01T00:00:00.000Z", "value": 1}]},
        {"name": "DE", "points": [{"timestamp": "2025-03-01T00:00:00.000Z", "value": 1}]},
        {"name": "FR", "points": [{"timestamp": "2025-03-01T00:00:00.000Z", "value": 1}]},
    ]
    table = await _data(client, key, {"title": "t", "type": "table", "event": "signup"})
    assert _values(table) == {"signup": [5]}


async def test_empty_range_gives_zeros(client, key):
    body = await _data(client, key, _line(), "from=2024-01-01T00:00:00Z&to=2024-01-02T00:00:00Z")
    assert _values(body) == {"signup": [0, 0]}
    grouped = await _data(client, key, _line(group_by="plan"), "from=2024-01-01T00:00:00Z&to=2024-01-02T00:00:00Z")
    assert grouped["series"] == []


async def test_many_groups_fold_into_other(client, make_key):
    key = await make_key("read,write")
    events = [{"event": "tap", "user_id": f"u{i}", "timestamp": f"{DAY1}T12:00:00Z",
               "properties": {"button": f"b{i:02d}"}} for i in range(25)]
    events += [{"event": "tap", "user_id": "x", "timestamp": f"{DAY1}T12:00:00Z", "properties": {"button": "b00"}}]
    await _ingest(client, key, events)
    body = await _data(client, key, {"title": "t", "type": "pie", "event": "tap", "group_by": "button"})
    names = [s["name"] for s in body["series"]]
    assert len(names) == 21 and names[0] == "b00" and names[-1] == "(other)"
    assert body["series"][0]["points"][0]["value"] == 2
    assert body["series"][-1]["points"][0]["value"] == 5
    assert sum(s["points"][0]["value"] for s in body["series"]) == 26


async def test_a_value_named_other_joins_the_fold_and_a_missing_value_is_a_group(client, make_key):
    """A property value that reads "(other)" is one more group when nothing is folded, and part of the fold when
    something is; events without the property are the group "(none)", ranked like any value, with the events
    whose value reads "(none)"."""
    key = await make_key("read,write")
    at = f"{DAY1}T12:00:00Z"
    few = [{"event": "tap", "user_id": f"u{i}", "timestamp": at, "properties": {"button": name}}
           for i, name in enumerate(["(other)"] * 3 + ["a"] * 2 + ["(none)"])]
    few += [{"event": "tap", "user_id": "n", "timestamp": at, "properties": {}}]
    await _ingest(client, key, few)
    pie = {"title": "t", "type": "pie", "event": "tap", "group_by": "button"}
    body = await _data(client, key, pie)
    assert [(s["name"], s["points"][0]["value"]) for s in body["series"]] == [("(other)", 3), ("(none)", 2), ("a", 2)]
    many = [{"event": "tap", "user_id": f"m{i}", "timestamp": at, "properties": {"button": f"b{i:02d}"}}
            for i in range(25)]
    await _ingest(client, key, many)
    body = await _data(client, key, pie)
    series = [(s["name"], s["points"][0]["value"]) for s in body["series"]]
    # Ranked: (other) 3, (none) 2, a 2, then the 25 single taps by name: 17 of them kept, 8 folded with "(other)".
    assert series == [("(none)", 2), ("a", 2), *((f"b{i:02d}", 1) for i in range(17)), ("(other)", 3 + 8)]
    line = await _data(client, key, {**pie, "type": "line"})
    assert [(s["name"], sum(p["value"] for p in s["points"])) for s in line["series"]] == series


async def test_funnel_counts_users_in_order(client, make_key):
    key = await make_key("read,write")
    t = "2025-03-02T10:0{}:00Z"
    await _ingest(client, key, [
        {"event": "view", "user_id": "u1", "timestamp": t.format(1), "properties": {"src": "ad"}},
        {"event": "cart", "user_id": "u1", "timestamp": t.format(2), "properties": {"src": "ad"}},
        {"event": "buy", "user_id": "u1", "timestamp": t.format(3), "properties": {"src": "ad"}},
        {"event": "view", "user_id": "u2", "timestamp": t.format(1), "properties": {"src": "ad"}},
        {"event": "cart", "user_id": "u2", "timestamp": t.format(2), "properties": {"src": "ad"}},
        {"event": "cart", "user_id": "u3", "timestamp": t.format(0), "properties": {"src": "ad"}},
        {"event": "view", "user_id": "u3", "timestamp": t.format(1), "properties": {"src": "ad"}},
        {"event": "view", "anonymous_id": "a1", "timestamp": t.format(1), "properties": {"src": "mail"}},
        {"event": "buy", "anonymous_id": "a1", "timestamp": t.format(2), "properties": {"src": "mail"}},
    ])
    chart = {"title": "f", "type": "funnel", "event": "view", "steps": ["cart", "buy"]}
    body = await _data(client, key, chart)
    assert body["type"] == "funnel"
    assert [(s["name"], s["points"][0]["value"]) for s in body["series"]] == [("view", 4), ("cart", 2), ("buy", 1)]
    body = await _data(client, key, {**chart, "steps": ["buy"]})
    assert [s["points"][0]["value"] for s in body["series"]] == [4, 2]
    filtered = await _data(client, key, {**chart, "steps": ["buy"],
                                         "filters": [{"property": "src", "operator": "eq", "value": "mail"}]})
    assert [s["points"][0]["value"] for s in filtered["series"]] == [1, 1]
    repeated = await _data(client, key, {**chart, "event": "cart", "steps": ["cart"]})
    assert [s["points"][0]["value"] for s in repeated["series"]] == [3, 0]


async def test_a_funnel_step_repeated_later_needs_an_event_of_its_own(client, make_key):
    """view -> cart -> view: a view and a cart at one instant may be steps 1 and 2, but the one view cannot
    be step 3 as well (it was, as step 3 only had to be at or after the cart); a later view can."""
    key = await make_key("read,write")
    at = "2025-03-02T10:00:00Z"
    await _ingest(client, key, [{"event": "view", "user_id": u, "timestamp": at} for u in ("u1", "u2")]
                  + [{"event": "cart", "user_id": u, "timestamp": at} for u in ("u1", "u2")]
                  + [{"event": "view", "user_id": "u2", "timestamp": "2025-03-02T10:00:01Z"}])
    body = await _data(client, key, {"title": "f", "type": "funnel", "event": "view", "steps": ["cart", "view"]})
    assert [(s["name"], s["points"][0]["value"]) for s in body["series"]] == [("view", 2), ("cart", 2), ("view", 1)]


async def test_other_env_events_are_not_counted(client, key, make_key):
    sandbox = await make_key("read,write", test=True)
    await _ingest(client, sandbox, SIGNUPS)
    body = await _data(client, sandbox, _line(filters=[{"property": "plan", "operator": "eq", "value": "pro"}]))
    assert _values(body) == {"signup": [2, 0, 0]}  # the sandbox's own events only, not live's as well


async def test_default_range_is_last_seven_days(client, key):
    body = await _data(client, key, _line(), "")
    assert body["interval"] == "day" and len(body["series"][0]["points"]) == 8


@pytest.mark.parametrize(("query", "field"), [
    ("interval=week", "interval"),
    ("from=yesterday", "from"),
    ("from=2025-03-02T00:00:00Z&to=2025-03-01T00:00:00Z", "from"),
    ("from=2020-01-01T00:00:00Z&to=2025-01-01T00:00:00Z&interval=hour", "interval"),
])
async def test_bad_range(client, key, query, field):
    made = await (await client.post("/v1/dashboards", headers=bearer(key),
                                    json={"name": "d", "charts": [_line()]})).json()
    resp = await client.get(f"/v1/dashboards/{made['id']}/charts/{made['charts'][0]['id']}/data?{query}",
                            headers=bearer(key))
    assert resp.status == 400
    assert (await resp.json())["error"]["fields"][0]["field"] == field


async def test_property_names_are_data_not_sql(client, key):
    nasty = "plan') OR 1=1 --"
    body = await _data(client, key, _line(group_by=nasty,
                                          filters=[{"property": nasty, "operator": "gt", "value": 1}]))
    assert body["series"] == []


async def test_ranges_at_the_ends_of_time(client, key):
    body = await _data(client, key, _line(), "to=9999-12-31T23:59:59Z")
    assert len(body["series"][0]["points"]) == 8 and body["series"][0]["points"][-1]["value"] == 0
    body = await _data(client, key, _line(), "from=0001-01-01T00:00:00Z&to=0001-01-01T05:00:00Z&interval=hour")
    assert _values(body) == {"signup": [0] * 6}


async def test_a_line_chart_of_thousands_of_groups_keeps_the_largest_and_its_buckets_add_up(client, make_key,
                                                                                           analytics_store,
                                                                                           monkeypatch):
    """As pie charts (above) and grouped reports (tests/test_reports_groups.py): 20 series and "(other)", whose
    points with the kept ones add up, bucket by bucket, to the ungrouped chart's. The fold is made in the store:
    the process reads at most the kept groups and the fold per bucket, not a row per value (a chart grouped by
    an order id would hold millions of them on the event loop)."""
    key = await make_key("read,write")
    days = [DAY1, "2025-03-02", DAY3]
    events = [{"event": "tap", "user_id": f"u{k}", "timestamp": f"{days[k % 3]}T12:00:00Z",
               "properties": {"button": f"big{i:02d}"}} for i in range(30) for k in range(60 - i)]
    events += [{"event": "tap", "user_id": f"t{j}", "timestamp": f"{days[j % 3]}T13:00:00Z",
                "properties": {"button": f"tail{j}"}} for j in range(2500)]
    for at in range(0, len(events), 1000):
        await _ingest(client, key, events[at:at + 1000])
    read = _rows_read(analytics_store, monkeypatch)
    grouped = _values(await _data(client, key, {"title": "t", "type": "line", "event": "tap", "group_by": "button"}))
    assert set(grouped) == {f"big{i:02d}" for i in range(20)} | {"(other)"}
    assert 0 < sum(read) <= 21 * 3
    read.clear()
    pie = await _data(client, key, {"title": "t", "type": "pie", "event": "tap", "group_by": "button"})
    assert [s["name"] for s in pie["series"]] == [f"big{i:02d}" for i in range(20)] + ["(other)"]
    assert pie["series"][-1]["points"][0]["value"] == sum(60 - i for i in range(20, 30)) + 2500
    assert 0 < sum(read) <= 21
    assert all(sum(grouped[f"big{i:02d}"]) == 60 - i for i in range(20))
    plain = _values(await _data(client, key, {"title": "t", "type": "line", "event": "tap"}))
    assert [sum(points) for points in zip(*grouped.values(), strict=True)] == plain["tap"]
    assert sum(plain["tap"]) == len(events)
