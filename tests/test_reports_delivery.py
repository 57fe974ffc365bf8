"""Scheduled delivery through a real SMTP server on loopback: attachment, once per slot, catch-up once."""

from __future__ import annotations

import csv
import dataclasses
import email
import io
import secrets
import socket
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email import policy

import asyncpg
import pytest
from aiosmtpd.controller import Controller
from pypdf import PdfReader

from app.appkeys import MIRROR, POOL, REPORT_POOL, SCHEDULER
from app.outages import MIRROR_BEHIND
from app.reports.delivery import to_csv, to_pdf
from app.reports.runner import Result
from app.reports.schedule import JOB_NAME, next_slot
from storage import analytics_mirror, statement_timeout
from tests.reports_support import create_report, seed, set_plan, workspace_id
from tests.test_dependency_outages import HoldingRelay, _through_relay


class Inbox:
    """Keeps what reaches this test's own recipients: reports other tests scheduled in the run's database
    may fall due too (say, across midnight UTC)."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(6)
        self.all: list[tuple[list[str], email.message.EmailMessage]] = []
        self.refusing = False  # while set, this test's messages get a temporary refusal (451), as from a busy MTA
        self.refused: list[email.message.EmailMessage] = []

    def to(self, name: str) -> str:
        return f"{name}-{self.token}@example.com"

    @property
    def messages(self) -> list[tuple[list[str], email.message.EmailMessage]]:
        return [m for m in self.all if any(self.token in r for r in m[0])]

    async def handle_DATA(self, server, session, envelope):
        parsed = email.message_from_bytes(envelope.content, policy=policy.default)
        if self.refusing and any(self.token in r for r in envelope.rcpt_tos):
            self.refused.append(parsed)
            return "451 4.3.0 Try again later"
        self.all.append((list(envelope.rcpt_tos), parsed))
        return "250 OK"


@pytest.fixture
def smtp():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, f"smtp://127.0.0.1:{port}"
    controller.stop()


@pytest.fixture
async def app_client(make_client, settings, smtp, make_key, pool, workspace, database_url):
    client = await make_client(dataclasses.replace(settings, smtp_url=smtp[1]))
    key = await make_key("read,write")
    await seed(pool, await workspace_id(database_url, workspace), [
        ("signup", "u1", "2024-03-01T10:00:00Z"), ("signup", "u2", "2024-03-02T10:00:00Z")])
    return client, key


REPORT = {"name": "Daily signups", "type": "event_volume",
          "config": {"events": ["signup"], "from": "2024-03-01T00:00:00Z", "to": "2024-03-02T12:00:00Z"}}


async def make_due(client, report_id: str, ago: timedelta) -> None:
    async with client.app[POOL].acquire() as conn:
        await conn.execute("UPDATE reports SET next_run_at = $2 WHERE id = $1", report_id, datetime.now(UTC) - ago)


async def stored(client, report_id: str):
    async with client.app[POOL].acquire() as conn:
        report = await conn.fetchrow("SELECT next_run_at, last_run_at FROM reports WHERE id = $1", report_id)
        deliveries = await conn.fetch("SELECT status, due_at FROM report_deliveries WHERE report_id = $1", report_id)
    return report, deliveries


async def retry_due(client, report_id: str) -> None:
    """Time passes until the report's pending delivery may be tried again: every timestamp of the row moves back
    by as much as its next attempt is away (and a second), as if the clock had moved on."""
    async with client.app[POOL].acquire() as conn:
        await conn.execute(
            """UPDATE report_deliveries d SET created_at = created_at - s.shift, due_at = due_at - s.shift,
                   attempted_at = attempted_at - s.shift, next_attempt_at = next_attempt_at - s.shift,
                   give_up_at = give_up_at - s.shift
            FROM (SELECT id, greatest(next_attempt_at - now(), interval '0') + interval '1 second' AS shift
                  FROM report_deliveries WHERE report_id = $1 AND status = 'pending') s
            WHERE d.id = s.id""", report_id)


async def a_full_day(client, report_id: str) -> None:
    """The delivery's deadline a day after its claim, whatever the time the test runs at: the report's next slot
    (the next 00:00 UTC, or Monday's) may be minutes away, and retries made past it fail the delivery."""
    async with client.app[POOL].acquire() as conn:
        await conn.execute("UPDATE report_deliveries SET give_up_at = created_at + interval '24 hours' "
                           "WHERE report_id = $1", report_id)


async def delivery_row(client, report_id: str):
    async with client.app[POOL].acquire() as conn:
        [row] = await conn.fetch(
            """SELECT id, status, attempts, error, created_at, attempted_at, next_attempt_at, give_up_at
            FROM report_deliveries WHERE report_id = $1""", report_id)
    return row


def attachment(message):
    [part] = list(message.iter_attachments())
    return part.get_filename(), part.get_content_type(), part.get_content()


async def test_pdf_delivery_is_sent_once_per_slot(app_client, smtp):
    client, key = app_client
    inbox, _ = smtp
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "daily", "recipients": [inbox.to("a"), inbox.to("b")],
                               "format": "pdf"}})
    before, _ = await stored(client, report["id"])
    assert before["next_run_at"] == next_slot("daily", datetime.now(UTC))

    assert await client.app[SCHEDULER].run_now(JOB_NAME)
    assert inbox.messages == []  # not due yet

    await make_due(client, report["id"], timedelta(minutes=1))
    await client.app[SCHEDULER].run_now(JOB_NAME)
    [(rcpts, message)] = inbox.messages
    assert sorted(rcpts) == [inbox.to("a"), inbox.to("b")]
    assert message["Subject"] == "Tally report: Daily signups"
    name, content_type, pdf = attachment(message)
    assert (name, content_type) == ("daily-signups.pdf", "application/pdf")
    assert pdf.startswith(b"%PDF")
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    assert "Daily signups" in text and "signup" in text and "bucket" in text

    after, deliveries = await stored(client, report["id"])
    assert [d["status"] for d in deliveries] == ["sent"]
    assert after["next_run_at"] == next_slot("daily", datetime.now(UTC))
    assert after["last_run_at"] is not None

    await client.app[SCHEDULER].run_now(JOB_NAME)  # same slot again: nothing more
    assert len(inbox.messages) == 1


async def test_after_downtime_a_report_is_sent_once_with_csv(app_client, smtp):
    client, key = app_client
    inbox, _ = smtp
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")], "format": "csv"}})
    await make_due(client, report["id"], timedelta(days=5))  # five slots missed while down
    await client.app[SCHEDULER].run_now(JOB_NAME)
    await client.app[SCHEDULER].run_now(JOB_NAME)
    [(_, message)] = inbox.messages
    name, content_type, body = attachment(message)
    assert (name, content_type) == ("daily-signups.csv", "text/csv")
    rows = list(csv.reader(io.StringIO(body if isinstance(body, str) else body.decode())))
    assert rows == [["bucket", "event", "count"],
                    ["2024-03-01T00:00:00.000Z", "signup", "1"], ["2024-03-02T00:00:00.000Z", "signup", "1"]]
    after, deliveries = await stored(client, report["id"])
    assert len(deliveries) == 1 and deliveries[0]["status"] == "sent"
    assert after["next_run_at"] > datetime.now(UTC)


async def test_smtp_failure_keeps_the_delivery_for_a_retry(make_client, settings, make_key, smtp):
    inbox, url = smtp
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"smtp://127.0.0.1:{probe.getsockname()[1]}"
    client = await make_client(dataclasses.replace(settings, smtp_url=dead))
    key = await make_key("read,write")
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "weekly", "recipients": [inbox.to("ops")]}})
    await make_due(client, report["id"], timedelta(hours=1))
    await client.app[SCHEDULER].run_now(JOB_NAME)
    after, deliveries = await stored(client, report["id"])
    assert [d["status"] for d in deliveries] == ["pending"]
    assert after["next_run_at"] == next_slot("weekly", datetime.now(UTC))

    # The mail server is back: the pending delivery goes out, once.
    fixed = await make_client(dataclasses.replace(settings, smtp_url=url))
    await retry_due(client, report["id"])
    await fixed.app[SCHEDULER].run_now(JOB_NAME)
    await fixed.app[SCHEDULER].run_now(JOB_NAME)
    assert len(inbox.messages) == 1
    _, deliveries = await stored(client, report["id"])
    assert [d["status"] for d in deliveries] == ["sent"]


@asynccontextmanager
async def mirror_rounds_held(database_url: str):
    """Holds the advisory lock every mirror round takes: events still commit (their outbox rows with them) but
    none reaches the analytics store until the block ends, as behind a backlog."""
    holder = await asyncpg.connect(database_url)
    try:
        await holder.execute("SELECT pg_advisory_lock($1, $2)", *analytics_mirror._LOCK)
        yield
    finally:
        await holder.close()


async def test_a_delivery_that_finds_the_mirror_behind_is_retried_and_sent_once_it_caught_up(
        make_client, settings, make_key, smtp, pool, workspace, database_url):
    """A run that meets the store behind its mirror (MirrorBehind, a 503 on HTTP) will pass once the backlog is
    mirrored: the delivery stays pending for the next round, as after an SMTP failure. It was failed for good
    with "report: unavailable: …", so that slot's mail was never sent; then it gave up after three attempts, a
    minute apart, so a backlog of more than a few minutes lost it all the same: it is retried past that."""
    inbox, url = smtp
    client = await make_client(dataclasses.replace(settings, smtp_url=url, report_timeout_seconds=1))
    key = await make_key("read,write")
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")], "format": "csv"}})
    await make_due(client, report["id"], timedelta(minutes=1))
    async with mirror_rounds_held(database_url):
        await seed(pool, await workspace_id(database_url, workspace), [  # committed, waiting in the outbox
            ("signup", "u1", "2024-03-01T10:00:00Z"), ("signup", "u2", "2024-03-02T10:00:00Z")])
        for attempt in range(1, 5):
            if attempt > 1:
                await retry_due(client, report["id"])
            await client.app[SCHEDULER].run_now(JOB_NAME)
            if attempt == 1:
                await a_full_day(client, report["id"])  # run minutes before 00:00 UTC, its next slot cut it short
            assert inbox.messages == []
            async with client.app[POOL].acquire() as conn:
                [delivery] = await conn.fetch(
                    "SELECT status, attempts, error FROM report_deliveries WHERE report_id = $1", report["id"])
                last_run_at = await conn.fetchval("SELECT last_run_at FROM reports WHERE id = $1", report["id"])
            assert (delivery["status"], delivery["attempts"]) == ("pending", attempt)
            assert delivery["error"] == f"unavailable: {MIRROR_BEHIND}"
            assert last_run_at is None
    await client.app[MIRROR].catch_up()  # the backlog mirrored (the run's own wait is bounded by 1 s here)
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    await client.app[SCHEDULER].run_now(JOB_NAME)  # sent: nothing more
    [(rcpts, message)] = inbox.messages
    assert rcpts == [inbox.to("ops")]
    _, _, body = attachment(message)
    rows = list(csv.reader(io.StringIO(body if isinstance(body, str) else body.decode())))
    assert rows == [["bucket", "event", "count"],
                    ["2024-03-01T00:00:00.000Z", "signup", "1"], ["2024-03-02T00:00:00.000Z", "signup", "1"]]
    async with client.app[POOL].acquire() as conn:
        [delivery] = await conn.fetch("SELECT status, attempts, error FROM report_deliveries WHERE report_id = $1",
                                      report["id"])
    assert (delivery["status"], delivery["attempts"], delivery["error"]) == ("sent", 5, None)


async def test_a_delivery_that_finds_every_report_connection_busy_is_retried(make_client, settings, make_key,
                                                                              smtp, pool, workspace, database_url):
    """503 reports_busy on HTTP ("retry shortly"): the delivery waits for the next round too, then goes out."""
    inbox, url = smtp
    client = await make_client(dataclasses.replace(settings, smtp_url=url, report_pool_max=1,
                                                   report_timeout_seconds=0.3))
    key = await make_key("read,write")
    await seed(pool, await workspace_id(database_url, workspace), [("signup", "u1", "2024-03-01T10:00:00Z")])
    report = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")], "format": "csv"}})
    await make_due(client, report["id"], timedelta(minutes=1))
    held = await client.app[REPORT_POOL].acquire()  # every report connection busy
    try:
        await client.app[SCHEDULER].run_now(JOB_NAME)
    finally:
        await client.app[REPORT_POOL].release(held)
    assert inbox.messages == []
    async with client.app[POOL].acquire() as conn:
        [delivery] = await conn.fetch("SELECT status, attempts, error FROM report_deliveries WHERE report_id = $1",
                                      report["id"])
    assert (delivery["status"], delivery["attempts"]) == ("pending", 1)
    assert delivery["error"].startswith("unavailable: reports_busy: "), delivery["error"]
    await retry_due(client, report["id"])
    await client.app[SCHEDULER].run_now(JOB_NAME)
    [(_, message)] = inbox.messages
    _, _, body = attachment(message)
    assert (body if isinstance(body, str) else body.decode()).splitlines()[1:] == [
        "2024-03-01T00:00:00.000Z,signup,1", "2024-03-02T00:00:00.000Z,signup,0"]


async def test_a_custom_sql_delivery_that_meets_a_stalled_postgresql_is_retried(make_client, settings, make_key, smtp,
                                                                                 workspace, database_url, monkeypatch):
    """A stalled PostgreSQL cannot apply a custom SQL run's statement_timeout: the run answered report_timeout after
    asyncpg's 60 s, and the delivery failed for good as the report's own fault ("report: report_timeout: …"). It is
    an outage (storage.statement_timeout.STALL_GRACE_SECONDS past the timeout, here shortened): retried, then sent."""
    monkeypatch.setattr(statement_timeout, "STALL_GRACE_SECONDS", 0.5)
    inbox, url = smtp
    key = await make_key("read,write")
    await set_plan(database_url, workspace, "enterprise")
    relay, client = await _through_relay(make_client, settings, database_url, relay_class=HoldingRelay,
                                         smtp_url=url, custom_sql_timeout_seconds=0.5)
    try:
        report = await create_report(client, key, {
            "name": "SQL", "type": "custom", "config": {"sql": "SELECT 7 AS stalls_here"},
            "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")], "format": "csv"}})
        await make_due(client, report["id"], timedelta(minutes=1))
        relay.holding = b"stalls_here"  # the run's connection stalls at the customer's SQL
        await client.app[SCHEDULER].run_now(JOB_NAME)
        assert inbox.messages == [] and relay.held == 1
        async with client.app[POOL].acquire() as conn:
            [delivery] = await conn.fetch(
                "SELECT status, attempts, error FROM report_deliveries WHERE report_id = $1", report["id"])
        assert (delivery["status"], delivery["attempts"]) == ("pending", 1)
        assert delivery["error"].startswith("unavailable: postgres is unreachable"), delivery["error"]
        relay.holding = b""
        await retry_due(client, report["id"])
        await client.app[SCHEDULER].run_now(JOB_NAME)
        [(_, message)] = inbox.messages
        _, _, body = attachment(message)
        assert (body if isinstance(body, str) else body.decode()).splitlines() == ["stalls_here", "7"]
    finally:
        await relay.cut()


def test_next_slot_boundaries():
    wed = datetime(2024, 1, 31, 15, 0, tzinfo=UTC)
    assert next_slot("daily", wed) == datetime(2024, 2, 1, tzinfo=UTC)
    assert next_slot("weekly", wed) == datetime(2024, 2, 5, tzinfo=UTC)  # Monday
    assert next_slot("monthly", wed) == datetime(2024, 2, 1, tzinfo=UTC)
    assert next_slot("monthly", datetime(2024, 12, 15, tzinfo=UTC)) == datetime(2025, 1, 1, tzinfo=UTC)
    assert next_slot("daily", datetime(2024, 1, 1, tzinfo=UTC)) == datetime(2024, 1, 2, tzinfo=UTC)


def test_csv_and_pdf_cells_of_json_values_are_json_text():
    """A custom report's jsonb and boolean columns read in the attachment as they do in the API's JSON."""
    result = Result(["properties", "tags", "paid", "none", "n"],
                    [[{"plan": "pro", "seats": 3}, ["a", "b"], True, None, 1.5]], datetime(2026, 11, 1, tzinfo=UTC))
    rows = list(csv.reader(io.StringIO(to_csv(result).decode())))
    assert rows[1] == ['{"plan":"pro","seats":3}', '["a","b"]', "true", "", "1.5"]
    text = PdfReader(io.BytesIO(to_pdf("r", result))).pages[0].extract_text()
    assert '{"plan":"pro","seats":3}' in text and "true" in text and "True" not in text


def _placed_text(pdf: bytes) -> list[tuple[str, float, float]]:
    """(text, x, page width) of every piece of text the PDF draws."""
    placed = []
    for page in PdfReader(io.BytesIO(pdf)).pages:
        width = float(page.mediabox.width)

        def seen(text, cm, tm, _font, _size, width=width):
            if text.strip():
                placed.append((text.strip(), tm[4] * cm[0] + tm[5] * cm[2] + cm[4], width))
        page.extract_text(visitor_text=seen)
    return placed


def test_a_wide_pdf_keeps_every_column_on_the_page():
    """26 weeks of retention are 28 columns: the PDF splits them into tables that fit the page, each
    repeating the cohort, instead of drawing the cohort, users and the last weeks off the paper."""
    columns = ["cohort", "users", *(f"week_{k}" for k in range(1, 27))]
    rows = [["2026-10-05T00:00:00.000Z", 7, *[0.2857] * 26], ["2026-10-12T00:00:00.000Z", 3, *[None] * 26]]
    placed = _placed_text(to_pdf("Retention", Result(columns, rows, datetime(2026, 11, 1, tzinfo=UTC))))
    assert all(0 <= x < width for _, x, width in placed), [(t, x) for t, x, w in placed if not 0 <= x < w]
    texts = [t for t, _, _ in placed]
    assert all(c in texts for c in columns)
    assert texts.count("cohort") >= 2 and texts.count("2026-10-12T00:00:00.000Z") >= 2


async def test_a_name_with_line_breaks_is_delivered_with_others_in_the_same_round(app_client, smtp):
    """A report name may hold CR/LF; it went into the Subject header as is, the mail library refused it and
    the exception ended the whole round, so the deliveries after it (any workspace's) waited too
    (security walk-through)."""
    client, key = app_client
    inbox, _ = smtp
    odd = await create_report(client, key, {
        **REPORT, "name": "Signups\r\nBcc: evil@example.com", "schedule": {"frequency": "daily",
                                                                        "recipients": [inbox.to("a")]}})
    plain = await create_report(client, key, {
        **REPORT, "schedule": {"frequency": "daily", "recipients": [inbox.to("b")]}})
    for report in (odd, plain):
        await make_due(client, report["id"], timedelta(minutes=1))
    await client.app[SCHEDULER].run_now(JOB_NAME)
    got = {rcpts[0]: message for rcpts, message in inbox.messages}
    assert sorted(got) == [inbox.to("a"), inbox.to("b")]
    assert got[inbox.to("a")]["Subject"] == "Tally report: Signups Bcc: evil@example.com"
    assert got[inbox.to("a")]["Bcc"] is None
    for report in (odd, plain):
        _, deliveries = await stored(client, report["id"])
        assert [d["status"] for d in deliveries] == ["sent"]


async def test_csv_attachment_defuses_formulas_and_writes_json_cells(app_client, smtp, pool, database_url, workspace):
    """The emailed CSV follows the export's rule (docs/decisions.md, "CSV formula injection"): a text cell
    a spreadsheet would run as a formula starts with a quote. Before, event values went in as they were."""
    client, key = app_client
    inbox, _ = smtp
    await seed(pool, await workspace_id(database_url, workspace), [
        ("signup", "u3", "2024-03-01T11:00:00Z", {"company": '=HYPERLINK("http://evil.example","x")'})])
    report = await create_report(client, key, {
        **REPORT, "config": {**REPORT["config"], "group_by": "properties.company"},
        "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")], "format": "csv"}})
    await make_due(client, report["id"], timedelta(minutes=1))
    await client.app[SCHEDULER].run_now(JOB_NAME)
    [(_, message)] = inbox.messages
    _, _, body = attachment(message)
    rows = list(csv.reader(io.StringIO(body if isinstance(body, str) else body.decode())))
    assert ["2024-03-01T00:00:00.000Z", "signup", '\'=HYPERLINK("http://evil.example","x")', "1"] in rows


async def test_a_report_grown_past_the_bucket_cap_fails_its_delivery_once_saying_why(app_client, smtp):
    """An hourly report without `to` passes 10,000 buckets about 416 days after its `from`: its scheduled
    delivery is failed at once with the reason (not retried, nothing sent), and the schedule stays, so the
    slot after a fix delivers."""
    client, key = app_client
    inbox, _ = smtp
    start = (datetime.now(UTC) - timedelta(days=400)).isoformat(timespec="seconds")
    report = await create_report(client, key, {
        "name": "Hourly", "type": "event_volume", "config": {"events": ["signup"], "interval": "hour", "from": start},
        "schedule": {"frequency": "daily", "recipients": [inbox.to("ops")]}})
    async with client.app[POOL].acquire() as conn:  # the days pass
        await conn.execute("UPDATE reports SET config = jsonb_set(config, '{from}', to_jsonb($2::text)) WHERE id = $1",
                           report["id"], (datetime.now(UTC) - timedelta(days=420)).isoformat())
    await make_due(client, report["id"], timedelta(minutes=1))
    for _ in range(2):
        await client.app[SCHEDULER].run_now(JOB_NAME)
    assert inbox.messages == []
    async with client.app[POOL].acquire() as conn:
        [delivery] = await conn.fetch("SELECT status, attempts, error FROM report_deliveries WHERE report_id = $1",
                                      report["id"])
        next_run_at = await conn.fetchval("SELECT next_run_at FROM reports WHERE id = $1", report["id"])
    assert (delivery["status"], delivery["attempts"]) == ("failed", 1)
    assert delivery["error"].startswith("report: invalid_request: config.from: "), delivery["error"]
    assert next_run_at == next_slot("daily", datetime.now(UTC))
