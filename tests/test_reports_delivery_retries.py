"""Scheduled deliveries retried as an MTA retries: a refused send or an unavailable run is tried again after
1, 2, 4, 8 … minutes, at most an hour apart, until a day after the claim or the report's next slot; three attempts a
minute apart lost a slot's mail whenever the mail server or a backlog was away for more than ~3 minutes. Time is
driven by moving the delivery's timestamps back (retry_due), never by sleeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.appkeys import POOL, SCHEDULER
from app.reports.schedule import FIRST_RETRY, JOB_NAME, MAX_RETRY, RETRY_FOR, next_slot
from storage import reports as store
from tests import test_reports_delivery as delivery
from tests.reports_support import create_report
from tests.test_reports_delivery import REPORT, a_full_day, delivery_row, make_due, retry_due

smtp, app_client = delivery.smtp, delivery.app_client  # the fixtures: a loopback SMTP server, an app sending there


async def refused_first_attempt(client, key: str, inbox) -> dict:
    """A weekly report to an MTA that refuses every message, due and attempted once."""
    inbox.refusing = True
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "weekly", "recipients": [inbox.to("ops")]}})
    await make_due(client, report["id"], timedelta(minutes=1))
    await client.app[SCHEDULER].run_now(JOB_NAME)
    return report


async def test_a_refused_send_is_retried_at_growing_delays_and_sent_once_smtp_accepts(app_client, smtp):
    """An MTA away for longer than a few minutes: the delivery is retried 1, 2, 4, 8 … minutes apart (it gave up
    after three attempts a minute apart, so that slot's mail was lost), each attempt counted before sending, the
    same Message-ID every time, and sent once the server accepts again."""
    client, key = app_client
    inbox, _ = smtp
    report = await refused_first_attempt(client, key, inbox)
    first = await delivery_row(client, report["id"])
    async with client.app[POOL].acquire() as conn:
        next_run_at = await conn.fetchval("SELECT next_run_at FROM reports WHERE id = $1", report["id"])
    # Retried until a day after the slot was claimed, or the report's next slot if that comes sooner.
    assert first["give_up_at"] == min(first["created_at"] + timedelta(hours=24), next_run_at)
    await a_full_day(client, report["id"])  # run half an hour before Monday 00:00 UTC, five retries passed it
    for attempt, minutes in enumerate([1, 2, 4, 8, 16], start=1):
        row = await delivery_row(client, report["id"])
        assert (row["status"], row["attempts"]) == ("pending", attempt)
        assert row["error"].startswith("smtp: "), row["error"]
        assert row["error"].find("451") > 0, row["error"]
        assert row["next_attempt_at"] - row["attempted_at"] == timedelta(minutes=minutes)
        await client.app[SCHEDULER].run_now(JOB_NAME)  # the retry is not due yet: nothing happens
        assert (await delivery_row(client, report["id"]))["attempts"] == attempt
        if attempt < 5:
            await retry_due(client, report["id"])
            await client.app[SCHEDULER].run_now(JOB_NAME)
    assert inbox.messages == [] and len(inbox.refused) == 5
    inbox.refusing = False  # the mail server is back
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    [(_, message)] = inbox.messages
    row = await delivery_row(client, report["id"])
    assert (row["status"], row["attempts"], row["error"]) == ("sent", 6, None)
    expected = f"<report-{report['id']}-delivery-{row['id']}@tally>"
    assert {m["Message-ID"] for m in inbox.refused} == {expected} and message["Message-ID"] == expected


async def test_a_send_still_refused_at_its_deadline_fails_with_its_last_error(app_client, smtp):
    """The delays grow to an hour and stay there; the failure whose next try would come at or past the deadline
    fails the delivery, with the server's answer kept on it."""
    client, key = app_client
    inbox, _ = smtp
    report = await refused_first_attempt(client, key, inbox)
    await a_full_day(client, report["id"])
    delays = []
    for _ in range(40):
        row = await delivery_row(client, report["id"])
        delays.append((row["next_attempt_at"] - row["attempted_at"]) // timedelta(minutes=1))
        if row["status"] != "pending":
            break
        await retry_due(client, report["id"])
        await client.app[SCHEDULER].run_now(JOB_NAME)
    assert row["status"] == "failed"
    assert row["error"].startswith("smtp: ") and "451" in row["error"], row["error"]
    assert delays[:8] == [1, 2, 4, 8, 16, 32, 60, 60] and set(delays[6:]) == {60}
    assert row["attempted_at"] < row["give_up_at"] <= row["next_attempt_at"]
    assert row["attempts"] == len(delays) == len(inbox.refused)
    assert sum(delays[:-1]) < 24 * 60 <= sum(delays)
    assert inbox.messages == []
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)  # failed for good: no more attempts
    assert (await delivery_row(client, report["id"]))["attempts"] == row["attempts"]


async def _attempt_left_unfinished(client, key, recipient: str) -> tuple[dict, dict]:
    """A weekly report to `recipient`, due, claimed, and its attempt counted but never finished (a crash between
    counting an attempt and sending): the report and its delivery row."""
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "weekly", "recipients": [recipient]}})
    await make_due(client, report["id"], timedelta(minutes=1))
    async with client.app[POOL].acquire() as conn:
        await store.claim_due(conn, datetime.now(UTC), next_slot, RETRY_FOR)
        row = await delivery_row(client, report["id"])
        assert await store.start_attempt(conn, row["id"], datetime.now(UTC), FIRST_RETRY, MAX_RETRY) is True
    return report, row


async def test_an_attempt_that_never_finished_waits_its_delay_and_counts(app_client, smtp):
    """A crash between counting an attempt and sending: the next round does not try at once but after the delay,
    and the crashed attempt counts; past the deadline such a delivery fails, saying no attempt finished."""
    client, key = app_client
    inbox, _ = smtp
    report, _ = await _attempt_left_unfinished(client, key, inbox.to("ops"))
    await client.app[SCHEDULER].run_now(JOB_NAME)  # the crashed attempt's retry is not due yet
    row = await delivery_row(client, report["id"])
    assert (row["status"], row["attempts"], inbox.messages) == ("pending", 1, [])
    assert row["next_attempt_at"] - row["attempted_at"] == FIRST_RETRY
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    assert len(inbox.messages) == 1
    assert ((await delivery_row(client, report["id"]))["attempts"]) == 2

    other, row = await _attempt_left_unfinished(client, key, inbox.to("late"))
    async with client.app[POOL].acquire() as conn:
        await conn.execute("UPDATE report_deliveries SET give_up_at = now() WHERE id = $1", row["id"])
    await retry_due(client, other["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    row = await delivery_row(client, other["id"])
    assert (row["status"], row["attempts"], row["error"]) == ("failed", 1, "no attempt finished in time")
    assert len(inbox.messages) == 1
