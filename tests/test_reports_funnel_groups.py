"""A grouped funnel keeps its largest groups, by the users entering step 1, and folds the rest into one "(other)"
group, as grouped event volume does: a property with thousands of distinct values made a row per value and step.
Each user is in one group (the value on their entry event), so the groups' step counts, the fold's included,
add up to the ungrouped funnel's."""

from __future__ import annotations

from collections import Counter

from app.appkeys import MIRROR
from tests.conftest import bearer
from tests.reports_support import create_report, run_report, seed, workspace_id

STEPS = ["signup", "purchase", "invite"]
RANGE = {"from": "2024-06-03T00:00:00Z", "to": "2024-06-05T23:59:59Z"}
BIG, TAIL, NULLS = 60, 1500, 7


def dataset() -> tuple[list[tuple], dict[str | None, list[int]]]:
    """Events, and each group's users per step. big00..big59 enter 100, 100, 98, 98 … users (pairs tie, so a cut
    between a pair is settled by value); 1,500 values of one user each; 7 users without the property."""
    events, steps = [], {}

    def user(uid: str, plan: str | None, level: int) -> None:
        props = {} if plan is None else {"plan": plan}
        events.append(("signup", uid, "2024-06-03T10:00:00Z", props))
        if level >= 2:
            events.append(("purchase", uid, "2024-06-03T11:00:00Z", {"plan": "elsewhere"}))
        if level >= 3:
            events.append(("invite", uid, "2024-06-04T12:00:00Z"))
        per = steps.setdefault(plan, [0, 0, 0])
        for k in range(level):
            per[k] += 1

    for i in range(BIG):
        for k in range(100 - 2 * (i // 2)):
            user(f"b{i}-{k}", f"big{i:02d}", 1 + (k % 2 == 0) + (k % 4 == 0))
    for j in range(TAIL):
        user(f"t{j}", f"tail{j:04d}", 1 + (j % 3 == 0) + (j % 9 == 0))
    for n in range(NULLS):
        user(f"n{n}", None, 1 + (n % 2))
    return events, steps


async def test_a_funnel_grouped_by_thousands_of_values_keeps_the_largest_and_folds_the_rest(
        client, make_key, pool, workspace, database_url):
    key = await make_key("read,write")
    events, steps = dataset()
    await seed(pool, await workspace_id(database_url, workspace), events)
    await client.app[MIRROR].catch_up()
    plain = await run_report(client, key, (await create_report(client, key, {
        "name": "p", "type": "funnel", "config": {"events": STEPS, **RANGE}}))["id"])
    assert [r[2] for r in plain["rows"]] == [sum(s[k] for s in steps.values()) for k in range(3)]
    assert "other_groups" not in plain

    for config, kept in (({}, 50), ({"group_limit": 9}, 9)):
        report = await create_report(client, key, {"name": "g", "type": "funnel", "config": {
            "events": STEPS, **RANGE, "group_by": "plan", **config}})
        grouped = await run_report(client, key, report["id"])
        assert grouped["columns"] == ["step", "event", "plan", "users", "conversion_from_first",
                                      "conversion_from_previous"]
        got: dict[str | None, list] = {}
        for step, event, group, users, from_first, from_previous in grouped["rows"]:
            assert event == STEPS[step - 1]
            got.setdefault(group, []).append((users, from_first, from_previous))
        # The largest by users entering step 1; big08 and big09 both have 92: big08 is kept at 9, by value.
        largest = {f"big{i:02d}" for i in range(kept)}
        assert set(got) == largest | {"(other)", None}
        assert len(grouped["rows"]) == 3 * (kept + 2)
        assert grouped["other_groups"] == BIG + TAIL - kept
        for group in largest | {None}:
            assert [u for u, _, _ in got[group]] == steps[group], group
        rest = [s for g, s in steps.items() if g is not None and g not in largest]
        fold = [sum(s[k] for s in rest) for k in range(3)]
        assert [u for u, _, _ in got["(other)"]] == fold
        # The fold's conversions are its own counts' ratios.
        assert [round(f, 4) for _, f, _ in got["(other)"]] == [round(n / fold[0], 4) for n in fold]
        # Every group together, the fold and the null group included, is the ungrouped funnel.
        assert [sum(got[g][k][0] for g in got) for k in range(3)] == [r[2] for r in plain["rows"]]


async def test_few_funnel_groups_are_all_kept_and_the_cap_is_bounded(client, make_key, pool, workspace,
                                                                     database_url):
    key = await make_key("read,write")
    await seed(pool, await workspace_id(database_url, workspace), [
        ("signup", "u1", "2024-06-03T10:00:00Z", {"plan": "pro"}), ("signup", "u2", "2024-06-03T10:00:00Z", {})])
    await client.app[MIRROR].catch_up()
    report = await create_report(client, key, {"name": "g", "type": "funnel", "config": {
        "events": STEPS, **RANGE, "group_by": "plan", "group_limit": 1}})
    grouped = await run_report(client, key, report["id"])
    assert Counter(row[2] for row in grouped["rows"]) == {"pro": 3, None: 3}
    assert grouped["other_groups"] == 0
    for bad in (0, 1001, "5"):
        resp = await client.post("/v1/reports", headers=bearer(key), json={
            "name": "g", "type": "funnel", "config": {"events": STEPS, "group_by": "plan", "group_limit": bad}})
        assert resp.status == 400
        assert (await resp.json())["error"]["message"].startswith("config.group_limit")
