"""Scheduled delivery: slot arithmetic and the scheduler job that claims due reports and emails them.

Slots are midnight UTC: daily every day, weekly on Mondays, monthly on the 1st. A report's
next_run_at is the first slot after it was scheduled. Each round first claims due reports (one
pending delivery each, next_run_at moved past now, one transaction), then sends pending deliveries.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from aiohttp import web

from app.appkeys import ANALYTICS, METRICS, MIRROR, POOL, REPORT_POOL, SETTINGS
from app.outages import MIRROR_BEHIND, MirrorBehind, unreachable
from app.reports import delivery
from app.reports.runner import run_report
from app.responses import ApiError
from storage import reports as store

log = logging.getLogger("tally.reports")

JOB_NAME = "report_delivery"
JOB_SECONDS = 60
# A failed send, or a run the store could not serve yet, is tried again after 1, 2, 4, 8 … minutes, at most an hour
# apart, until a day after the claim or the report's next slot, whichever is first (docs/decisions.md).
FIRST_RETRY, MAX_RETRY, RETRY_FOR = timedelta(minutes=1), timedelta(hours=1), timedelta(hours=24)


def next_slot(frequency: str, after: datetime) -> datetime:
    """The first slot strictly after `after`."""
    now = after.astimezone(UTC)
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if frequency == "daily":
        return day + timedelta(days=1)
    if frequency == "weekly":
        return day - timedelta(days=day.weekday()) + timedelta(weeks=1)
    if frequency == "monthly":
        return datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    raise ValueError(f"unknown frequency {frequency!r}")


async def deliver_due(app: web.Application, now: datetime | None = None) -> int:
    """One round at `now` (the clock by default); returns how many deliveries were sent."""
    settings, pool = app[SETTINGS], app[POOL]
    if not settings.smtp_url:
        # Leave next_run_at alone: once SMTP is configured, each overdue report is sent once.
        log.debug("TALLY_SMTP_URL is not set; scheduled reports wait")
        return 0
    now = now or datetime.now(UTC)
    async with pool.acquire() as conn:
        await store.claim_due(conn, now, next_slot, RETRY_FOR)
        pending = await store.pending_deliveries(conn, now)
    sent = 0
    for item in pending:
        async with pool.acquire() as conn:
            started = await store.start_attempt(conn, item["delivery_id"], now, FIRST_RETRY, MAX_RETRY)
        if isinstance(started, str):  # its deadline passed with no attempt left to finish (a crash)
            log.warning("report delivery failed report=%s delivery=%s: %s", item["id"], item["delivery_id"], started)
            app[METRICS].report_deliveries.labels("failed").inc()
        if started is not True:
            continue
        error, final = await _deliver_one(app, item)
        async with pool.acquire() as conn:
            status = await store.finish_delivery(conn, item["delivery_id"], error, final=final)
        if error is not None:
            log.warning("report delivery %s report=%s delivery=%s: %s", "failed" if status == "failed" else
                        "will be retried", item["id"], item["delivery_id"], error)
        sent += error is None
        app[METRICS].report_deliveries.labels("sent" if error is None else "failed" if status == "failed"
                                              else "retry").inc()
    return sent


async def _deliver_one(app: web.Application, item) -> tuple[str | None, bool]:
    """(None, False) when sent; otherwise (error, final). Final only for the report's own errors ('report: …',
    its definition or its size), which retrying will not change. What an HTTP run answers 503 with Retry-After
    (the store behind its mirror, PostgreSQL or Redis unreachable, every report connection busy) passes once
    that is over, so it is retried as an SMTP failure is: after a growing delay, until the deadline."""
    settings = app[SETTINGS]
    schedule = item["schedule"] or {}
    try:
        result = await run_report(
            app[REPORT_POOL], settings, app[METRICS], workspace_id=item["workspace_id"], env=item["env"],
            plan=item["plan"], report_type=item["type"], config=item["config"], analytics=app[ANALYTICS],
            catch_up=app[MIRROR].catch_up,
        )
    except MirrorBehind:  # as the HTTP answer says it (app.outages.mirror_behind)
        return f"unavailable: {MIRROR_BEHIND}", False
    except ApiError as exc:
        if exc.status == 503:  # reports_busy: retry shortly
            return f"unavailable: {exc.code}: {exc.message}", False
        return f"report: {exc.code}: {exc.message}", True
    except Exception as exc:
        dependency = unreachable(exc)  # as app.outages classifies it for a 503
        if dependency is None:
            raise
        return f"unavailable: {dependency} is unreachable ({type(exc).__name__}: {exc})", False
    message = await delivery.build_message(
        sender=settings.smtp_from, recipients=schedule.get("recipients", []), report_name=item["name"],
        fmt=schedule.get("format", "csv"), result=result,
        message_id=f"<report-{item['id']}-delivery-{item['delivery_id']}@tally>",
    )
    try:
        await delivery.send(settings.smtp_url, message)
    except Exception as exc:  # network and SMTP failures alike: retried after a delay
        return f"smtp: {exc}", False
    async with app[POOL].acquire() as conn:
        await store.mark_run(conn, item["id"], result.generated_at)
    return None, False


def register(app: web.Application, scheduler) -> None:
    async def job() -> None:
        await deliver_due(app)

    scheduler.every(JOB_NAME, JOB_SECONDS, job)
