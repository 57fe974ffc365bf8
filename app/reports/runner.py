"""Running a saved report: dispatch by type, plan check, timeouts (504), result shape."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import asyncpg

from app.outages import MirrorBehind, store_caught_up
from app.reports.config import (
    CustomConfig,
    EventVolumeConfig,
    FunnelConfig,
    RetentionConfig,
    parse_config,
)
from app.responses import ApiError, iso_exact, iso_ms
from app.settings import Settings
from common.metrics import Metrics
from storage import report_queries as q
from storage import reports as store
from storage import statement_timeout
from storage.clickhouse import AnalyticsStore, QueryTooSlow
from storage.read_slots import reads_for

TOO_LARGE_MESSAGE = ("the result is larger than {n} bytes of JSON; select fewer columns, aggregate, or add a "
                     "LIMIT")
TIMEOUT_MESSAGE = "the report took longer than {s:g} s; narrow the date range or use scheduled delivery"


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[list[Any]]
    generated_at: datetime
    truncated: bool | None = None  # custom SQL only: the row cap cut the result
    other_groups: int | None = None  # grouped event volume and funnel only: the values folded into "(other)"

    def json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "columns": self.columns,
            "rows": [[_cell(v) for v in row] for row in self.rows],
            "generated_at": iso_ms(self.generated_at),
        }
        if self.truncated is not None:
            body["truncated"] = self.truncated
        if self.other_groups is not None:
            body["other_groups"] = self.other_groups
        return body


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso_exact(value)
    if isinstance(value, list):  # a custom SQL array of timestamps
        return [_cell(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return value


def require_plan(report_type: str, plan: str) -> None:
    if report_type == "custom" and plan != "enterprise":
        raise ApiError(403, "plan_required", "custom SQL reports need the enterprise plan")


def parse_group(group_by: str | None) -> tuple[str | None, list[str]]:
    """'traits.plan' -> user trait; 'properties.plan' or a bare 'plan' -> event property (dots nest)."""
    if not group_by:
        return None, []
    kind, _, rest = group_by.partition(".")
    if kind in ("traits", "properties") and rest:
        return kind, rest.split(".")
    return "properties", group_by.split(".")


async def _built_in(store: AnalyticsStore, conn: asyncpg.Connection, ws: int, env: str, config: Any,
                    now: datetime, limits: dict, pg_seconds: float | None) -> tuple[list, list, int | None]:
    """(columns, rows, other_groups: for a grouped event volume or funnel, else None). `pg_seconds`: PostgreSQL's
    timeout for a trait's users (storage.report_queries.trait_index)."""
    if isinstance(config, EventVolumeConfig):
        start, end = config.window(now)
        kind, path = parse_group(config.group_by)
        volume = await q.event_volume(store, conn, ws, env, events=config.events, start=start, end=end,
                                      interval=config.interval, group_kind=kind, group_path=path,
                                      group_limit=config.group_limit, settings=limits, pg_seconds=pg_seconds)
        columns = ["bucket", "event", *([config.group_by] if kind else []), "count"]
        rows = [[r.bucket, r.event, *([r.grp] if kind else []), r.n] for r in volume.rows]
        return columns, rows, volume.other_groups if kind else None
    if isinstance(config, FunnelConfig):
        start, end = config.window(now)
        kind, path = parse_group(config.group_by)
        funnel = await q.funnel(store, conn, ws, env, events=config.events, start=start, end=end,
                                window_days=config.conversion_window_days, group_kind=kind, group_path=path,
                                group_limit=config.group_limit, settings=limits, pg_seconds=pg_seconds)
        columns = ["step", "event", *([config.group_by] if kind else []), "users",
                   "conversion_from_first", "conversion_from_previous"]
        rows = [[r.step, r.event, *([r.grp] if kind else []), r.users, r.from_first, r.from_previous]
                for r in funnel.rows]
        return columns, rows, funnel.other_groups if kind else None
    assert isinstance(config, RetentionConfig)
    start, end = config.window(now)
    records = await q.retention(store, ws, env, start_event=config.start_event, return_event=config.return_event,
                                start=start, end=end, period=config.period, periods=config.periods, now=now,
                                settings=limits)
    columns = ["cohort", "users", *(f"{config.period}_{k}" for k in range(1, config.periods + 1))]
    return columns, [[r.cohort, r.users, *r.shares] for r in records], None


async def run_report(
    pool: asyncpg.Pool, settings: Settings, metrics: Metrics, *, workspace_id: int, env: str, plan: str,
    report_type: str, config: dict, analytics: AnalyticsStore | None = None,
    catch_up: Callable[[], Awaitable[object]] | None = None,
) -> Result:
    """Built-in types run on the analytics store (required for them), after `catch_up` brought it up to date
    (MirrorBehind when it cannot within the timeout); custom SQL on PostgreSQL. Both within the report timeout."""
    require_plan(report_type, plan)
    parsed = parse_config(report_type, config)
    reads_for(workspace_id)  # its analytics reads are the workspace's (storage/read_slots.py)
    now = datetime.now(UTC)
    timeout = settings.report_timeout_seconds
    started, outcome = time.perf_counter(), "error"
    catching_up = False
    try:
        # The report pool is small on purpose: a run waits its turn (at most its own timeout) rather
        # than taking connections that ingestion and other tenants need.
        try:
            conn = await pool.acquire(timeout=timeout)
        except TimeoutError:
            outcome = "busy"
            raise ApiError(503, "reports_busy", "too many reports are running; retry shortly",
                           headers={"Retry-After": "5"}) from None
        try:
            if isinstance(parsed, CustomConfig):
                timeout = min(timeout, settings.custom_sql_timeout_seconds)
                sql = parsed.sql.strip().rstrip(";").rstrip()
                columns, rows, truncated = await store.run_custom_sql(
                    conn, workspace_id, env, sql, max_rows=settings.custom_sql_max_rows,
                    timeout_ms=int(timeout * 1000), max_bytes=settings.custom_sql_max_bytes,
                )
                outcome = "ok"
                return Result(columns, rows, now, truncated)
            assert analytics is not None, "built-in reports need the analytics store"
            limits = {"max_execution_time": max(1, round(timeout))}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            async with asyncio.timeout_at(deadline):
                if catch_up is not None:
                    catching_up = True
                    if not await store_caught_up(catch_up):
                        raise MirrorBehind()
                    catching_up = False
                # A trait's users are read from PostgreSQL under a timeout of its own, within the run's, so that a
                # stall there is told apart from a slow report.
                pg_seconds = statement_timeout.timeout_before(deadline - loop.time())
                columns, rows, other_groups = await _built_in(analytics, conn, workspace_id, env, parsed, now,
                                                              limits, pg_seconds)
            outcome = "ok"
            return Result(columns, rows, now, other_groups=other_groups)
        finally:
            await pool.release(conn)
    except store.ResultTooLarge:
        outcome = "too_large"
        raise ApiError(413, "result_too_large", TOO_LARGE_MESSAGE.format(
            n=settings.custom_sql_max_bytes)) from None
    except (asyncpg.QueryCanceledError, TimeoutError):
        outcome = "timeout"
        if catching_up:
            raise MirrorBehind() from None
        raise ApiError(504, "report_timeout", TIMEOUT_MESSAGE.format(s=timeout)) from None
    except QueryTooSlow:  # the run's own max_execution_time, as the store classifies it
        outcome = "timeout"
        raise ApiError(504, "report_timeout", TIMEOUT_MESSAGE.format(s=timeout)) from None
    except asyncpg.PostgresError as exc:
        if report_type != "custom":
            raise
        # The customer's own SQL failed (syntax, permission, read-only...): say why, as a 400.
        raise ApiError(400, "invalid_sql", f"the SQL failed: {exc.args[0] if exc.args else exc}") from None
    finally:
        metrics.report_run_seconds.labels(report_type, outcome).observe(time.perf_counter() - started)
