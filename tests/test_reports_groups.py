"""A grouped event-volume report keeps its largest groups and folds the rest into one "(other)" group, so a
property with thousands of distinct values answers a bounded result whose counts still add up to the ungrouped
report's. 50,000 distinct values made a 25.6 MB answer: a row per group and bucket."""

from __future__ import annotations

from collections import Counter

from app.appkeys import MIRROR
from tests.reports_support import create_report, run_report, seed, workspace_id

DAYS = ["2024-06-03", "2024-06-04", "2024-06-05"]
RANGE = {"from": "2024-06-03T00:00:00Z", "to": "2024-06-05T23:59:59Z"}
BIG, TAIL = 60, 3000  # values big00..big59 with 200 - 2i events each, and 3,000 values of one event each


def dataset() -> list[tuple]:
    events = []
    for i in range(BIG):
        for k in range(200 - 2 * i):
            events.append(("signup" if k % 3 else "purchase", f"u{k}", f"{DAYS[k % 3]}T10:00:00Z",
                           {"plan": f"big{i:02d}"}))
    for j in range(TAIL):
        events.append(("signup" if j % 2 else "purchase", f"t{j}", f"{DAYS[j % 3]}T11:00:00Z", {"plan": f"tail{j}"}))
    events += [("signup", "n", f"{DAYS[d % 3]}T12:00:00Z", {}) for d in range(25)]  # the null group
    return events


async def _runs(client, key, config: dict) -> tuple[dict, dict]:
    grouped = await create_report(client, key, {"name": "g", "type": "event_volume", "config": {
        "events": ["signup", "purchase"], **RANGE, "group_by": "plan", **config}})
    plain = await create_report(client, key, {"name": "p", "type": "event_volume", "config": {
        "events": ["signup", "purchase"], **RANGE}})
    return await run_report(client, key, grouped["id"]), await run_report(client, key, plain["id"])


async def test_a_report_grouped_by_thousands_of_values_keeps_the_largest_and_folds_the_rest(
        client, make_key, pool, workspace, database_url):
    key = await make_key("read,write")
    events = dataset()
    await seed(pool, await workspace_id(database_url, workspace), events)
    await client.app[MIRROR].catch_up()
    totals = Counter(props.get("plan") for _, _, _, props in events)

    for config, kept in (({}, 50), ({"group_limit": 10}, 10)):
        grouped, plain = await _runs(client, key, config)
        assert grouped["columns"] == ["bucket", "event", "plan", "count"]
        groups = Counter()
        for _, _, group, n in grouped["rows"]:
            groups[group] += n
        named = set(groups) - {None, "(other)"}
        assert named == {f"big{i:02d}" for i in range(kept)}  # the largest, by their total over both events
        assert all(groups[g] == totals[g] for g in named)
        assert groups[None] == 25
        assert groups["(other)"] == sum(totals.values()) - sum(totals[g] for g in named) - 25
        assert grouped["other_groups"] == BIG + TAIL - kept
        # Every (bucket, event) of the ungrouped report is there, its groups adding up to its count.
        by_cell = Counter()
        for bucket, event, _, n in grouped["rows"]:
            by_cell[bucket, event] += n
        assert by_cell == Counter({(bucket, event): n for bucket, event, n in plain["rows"]})
        assert sum(n for *_, n in plain["rows"]) == len(events)
        # A row per bucket for each (event, group) that occurs: both events have every kept group and the fold,
        # only signup the null group.
        assert len(grouped["rows"]) == len(DAYS) * (2 * (kept + 1) + 1)
        assert "other_groups" not in plain


async def test_few_groups_are_all_kept_and_the_cap_is_bounded(client, make_key, pool, workspace, database_url):
    key = await make_key("read,write")
    await seed(pool, await workspace_id(database_url, workspace), [
        ("signup", "u1", f"{DAYS[0]}T10:00:00Z", {"plan": "pro"}), ("signup", "u2", f"{DAYS[1]}T10:00:00Z", {})])
    await client.app[MIRROR].catch_up()
    grouped, _ = await _runs(client, key, {"group_limit": 1})
    assert {row[2] for row in grouped["rows"]} == {"pro", None}
    assert grouped["other_groups"] == 0
    for bad in (0, 1001, "5"):
        resp = await client.post("/v1/reports", headers={"Authorization": f"Bearer {key}"}, json={
            "name": "g", "type": "event_volume", "config": {"events": ["signup"], "group_by": "plan",
                                                              "group_limit": bad}})
        assert resp.status == 400
        assert (await resp.json())["error"]["message"].startswith("config.group_limit")
