"""Saved reports, scheduled deliveries, and the custom-SQL sandbox (see 0005_reports.sql)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from storage.statement_timeout import own_timeout

# Matches tally_report.run_sql()'s own setting, so describing resolves names as running does.
SANDBOX_SEARCH_PATH = "tally_report, pg_catalog, pg_temp"
COLUMNS = "id, name, type, config, schedule, created_at, updated_at, last_run_at, next_run_at"


async def insert_report(
    conn: asyncpg.Connection, *, report_id: str, workspace_id: int, env: str, name: str, type_: str,
    config: dict, schedule: dict | None, next_run_at: datetime | None,
) -> asyncpg.Record:
    return await conn.fetchrow(
        f"""INSERT INTO reports (id, workspace_id, env, name, type, config, schedule, next_run_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {COLUMNS}""",
        report_id, workspace_id, env, name, type_, config, schedule, next_run_at,
    )


async def get_report(conn: asyncpg.Connection, workspace_id: int, env: str, report_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM reports WHERE workspace_id = $1 AND env = $2 AND id = $3",
        workspace_id, env, report_id,
    )


async def list_reports(
    conn: asyncpg.Connection, workspace_id: int, env: str, *, before_id: str | None, limit: int
) -> list[asyncpg.Record]:
    """Newest first (ids are time-sortable); the cursor is the last id seen."""
    return await conn.fetch(
        f"""SELECT {COLUMNS} FROM reports
        WHERE workspace_id = $1 AND env = $2 AND ($3::text IS NULL OR id < $3)
        ORDER BY id DESC LIMIT $4""",
        workspace_id, env, before_id, limit,
    )


async def update_report(
    conn: asyncpg.Connection, workspace_id: int, env: str, report_id: str, *, name: str, type_: str,
    config: dict, schedule: dict | None, next_run_at: datetime | None,
) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"""UPDATE reports SET name = $4, type = $5, config = $6, schedule = $7, next_run_at = $8,
               updated_at = now()
        WHERE workspace_id = $1 AND env = $2 AND id = $3 RETURNING {COLUMNS}""",
        workspace_id, env, report_id, name, type_, config, schedule, next_run_at,
    )


async def delete_report(conn: asyncpg.Connection, workspace_id: int, env: str, report_id: str) -> bool:
    status = await conn.execute(
        "DELETE FROM reports WHERE workspace_id = $1 AND env = $2 AND id = $3", workspace_id, env, report_id
    )
    return status == "DELETE 1"


async def mark_run(conn: asyncpg.Connection, report_id: str, at: datetime) -> None:
    await conn.execute("UPDATE reports SET last_run_at = $2 WHERE id = $1", report_id, at)


# --- scheduled delivery --------------------------------------------------------------------------

async def claim_due(
    conn: asyncpg.Connection, now: datetime, next_slot: Callable[[str, datetime], datetime], retry_for: timedelta,
    limit: int = 100,
) -> int:
    """In one transaction: record a pending delivery for each report whose slot has come and move its
    next_run_at to the first slot after `now`. After downtime a report gets one delivery, not one per
    missed slot; a crash before commit leaves both unchanged, so nothing is lost or doubled. A delivery is
    tried until `retry_for` after its claim or the report's next slot, whichever comes first."""
    async with conn.transaction():
        due = await conn.fetch(
            """SELECT id, next_run_at, schedule ->> 'frequency' AS frequency FROM reports
            WHERE next_run_at <= $1 ORDER BY next_run_at LIMIT $2 FOR UPDATE SKIP LOCKED""",
            now, limit,
        )
        if not due:
            return 0
        following = {r["id"]: next_slot(r["frequency"], now) for r in due}
        await conn.executemany(
            """INSERT INTO report_deliveries (report_id, due_at, created_at, next_attempt_at, give_up_at)
            VALUES ($1, $2, $3, $3, $4) ON CONFLICT DO NOTHING""",
            [(r["id"], r["next_run_at"], now, min(now + retry_for, following[r["id"]])) for r in due],
        )
        await conn.executemany(
            "UPDATE reports SET next_run_at = $2 WHERE id = $1", [(r["id"], following[r["id"]]) for r in due]
        )
    return len(due)


async def pending_deliveries(conn: asyncpg.Connection, now: datetime, limit: int = 100) -> list[asyncpg.Record]:
    """The pending deliveries due for an attempt, or past their deadline, at `now`."""
    return await conn.fetch(
        """SELECT d.id AS delivery_id, d.due_at, r.id, r.workspace_id, r.env, r.name, r.type, r.config,
                  r.schedule, w.plan
        FROM report_deliveries d JOIN reports r ON r.id = d.report_id JOIN workspaces w ON w.id = r.workspace_id
        WHERE d.status = 'pending' AND (d.next_attempt_at <= $1 OR d.give_up_at <= $1)
        ORDER BY d.next_attempt_at, d.id LIMIT $2""",
        now, limit,
    )


async def start_attempt(
    conn: asyncpg.Connection, delivery_id: int, now: datetime, first_delay: timedelta, max_delay: timedelta
) -> bool | str:
    """Count an attempt before sending and set when the next may begin (first_delay doubled per earlier attempt,
    at most max_delay), so a delivery that keeps crashing the sender backs off and gives up too. True to go on;
    False when it is not due or no longer pending; past its deadline, it is failed keeping its last error, which
    is returned."""
    gave_up = await conn.fetchval(
        """UPDATE report_deliveries SET status = 'failed', error = coalesce(error, 'no attempt finished in time')
        WHERE id = $1 AND status = 'pending' AND give_up_at <= $2 RETURNING error""",
        delivery_id, now,
    )
    if gave_up is not None:
        return gave_up
    attempts = await conn.fetchval(
        """UPDATE report_deliveries SET attempts = attempts + 1, attempted_at = $2,
               next_attempt_at = $2 + least($3::interval * power(2, least(attempts, 30)), $4::interval)
        WHERE id = $1 AND status = 'pending' AND next_attempt_at <= $2 RETURNING attempts""",
        delivery_id, now, first_delay, max_delay,
    )
    return attempts is not None


async def finish_delivery(conn: asyncpg.Connection, delivery_id: int, error: str | None, *, final: bool) -> str:
    """error None: sent. Otherwise pending for the next attempt, unless final or that attempt would come at or past
    the deadline: then failed, with `error` kept. Returns the status."""
    return await conn.fetchval(
        """UPDATE report_deliveries
        SET status = CASE WHEN $2::text IS NULL THEN 'sent'
                          WHEN $3 OR next_attempt_at >= give_up_at THEN 'failed' ELSE 'pending' END,
            error = $2, sent_at = CASE WHEN $2::text IS NULL THEN now() END
        WHERE id = $1 RETURNING status""",
        delivery_id, error, final,
    )


def _json_int(text: str) -> int | str:
    """Integers beyond 64 bits (numeric columns) stay exact as strings; JSON encoders refuse them."""
    value = int(text)
    return value if -(2**63) <= value < 2**64 else text


# --- custom SQL sandbox --------------------------------------------------------------------------

class ResultTooLarge(Exception):
    """The custom SQL result passed the byte cap; nothing beyond the cap was fetched."""


# The sandbox's rows as JSON text with a running byte total, computed by the server: a row that would
# pass the cap arrives without its text, so the service never holds more than max_bytes of results.
# ROWS ... CURRENT ROW lets the window stream rather than wait for the whole result.
_CAPPED_ROWS = """
SELECT CASE WHEN total <= $3 THEN t END AS t, total FROM (
    SELECT t, sum(octet_length(t)) OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total
    FROM (SELECT r::text AS t FROM tally_report.run_sql($1, $2) AS r) rows_as_json
) running"""
FETCH_ROWS = 200


async def run_custom_sql(
    conn: asyncpg.Connection, workspace_id: int, env: str, sql: str, *, max_rows: int, timeout_ms: int,
    max_bytes: int,
) -> tuple[list[str], list[list], bool]:
    """Run a customer's SELECT as tally_report_reader, scoped to one workspace and env, read only,
    under a statement timeout. Returns (columns, rows, truncated): rows past max_rows are cut
    (truncated); a result past max_bytes of JSON raises ResultTooLarge. Rows are fetched in chunks
    through a cursor, and the fetch stops at either cap. A statement that PostgreSQL has not ended
    a grace past its timeout raises PostgresStalled (storage/statement_timeout.py)."""
    async with own_timeout(conn, max(1, timeout_ms) / 1000) as bound:
        await conn.execute("SELECT tally_report_enter_scope($1, $2)", workspace_id, env, timeout=bound)
        await conn.execute("SELECT set_config('search_path', $1, true)", SANDBOX_SEARCH_PATH, timeout=bound)
        # Describe (never execute) the same subquery run_sql() wraps, for the column names: rows come back
        # as JSON objects, which cannot say what an empty result's columns were. A text with several
        # statements fails here ("cannot insert multiple commands"). First as the service: asyncpg looks
        # up types it has no codec for (arrays, ranges, composites) with set_config('jit', ...), which the
        # reader may not call (migration 0027); a prepare only parses, so nothing of the text runs. Then
        # as the reader, whose result is used, with every type already known.
        await conn.prepare(f"SELECT * FROM (\n{sql}\n) q", timeout=bound)
        await conn.execute("SET LOCAL ROLE tally_report_reader", timeout=bound)
        described = await conn.prepare(f"SELECT * FROM (\n{sql}\n) q", timeout=bound)
        attributes = described.get_attributes()
        columns = [a.name for a in attributes]
        instants = [a.type.name in ("timestamptz", "timestamptz[]") for a in attributes]
        texts: list[str] = []
        cursor = await conn.cursor(_CAPPED_ROWS, sql, max_rows + 1, max_bytes, timeout=bound)
        while len(texts) <= max_rows:
            chunk = await cursor.fetch(min(FETCH_ROWS, max_rows + 1 - len(texts)), timeout=bound)
            if not chunk:
                break
            for record in chunk:
                if record["t"] is None:
                    raise ResultTooLarge
                texts.append(record["t"])
    rows = [[_instant(value) if instant else _plain(value) for instant, (_, value) in zip(
                instants, json.loads(t, object_pairs_hook=_Pairs, parse_int=_json_int), strict=True)]
            for t in texts[:max_rows]]
    return columns, rows, len(texts) > max_rows


class _Pairs(list):
    """A JSON object read as its (key, value) pairs: a row keeps its columns in order, duplicates included."""


def _instant(value: Any) -> Any:
    """A timestamptz cell (or array of them) as a datetime, which the API writes as every timestamp it writes;
    PostgreSQL's JSON wrote it in the session's zone. Values Python cannot hold (infinity, BC) stay text."""
    if isinstance(value, list):
        return [_instant(v) for v in value]
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


def _plain(value: Any) -> Any:
    """A column's value with the objects inside it (jsonb columns such as properties) as dicts again."""
    if isinstance(value, _Pairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
