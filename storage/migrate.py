"""Numbered SQL migrations, applied once under an advisory lock so that processes starting together
migrate exactly once."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import asyncpg

log = logging.getLogger("tally.migrate")

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_LOCK_KEY = 7_264_001  # arbitrary, constant across versions

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class SchemaTooNew(RuntimeError):
    """The database holds migrations this release lacks: a newer release migrated it, and this one's SQL
    would meet tables and columns it does not know."""

    def __init__(self, versions: list[int]) -> None:
        self.versions = versions
        names = ", ".join(f"{v:04d}" for v in versions)
        super().__init__(f"the database was migrated by a newer release of Tally (migration {names} is unknown to "
                         "this one): run that release, or restore a backup taken before the upgrade")


def label(version: int, name: str) -> str:
    """How a migration is named to people: its file's stem, '0036_idempotency_keys'."""
    return f"{version:04d}_{name}"


def available() -> list[tuple[int, str, Path]]:
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        match = re.match(r"(\d+)_(.+)\.sql$", path.name)
        if match:
            found.append((int(match.group(1)), match.group(2), path))
    return found


async def _done(conn: asyncpg.Connection) -> set[int] | None:
    """The versions the database has applied; None for a database without the ledger (a new one)."""
    if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        return None
    return {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}


def _unknown(done: set[int]) -> None:
    unknown = sorted(done - {version for version, _, _ in available()})
    if unknown:
        raise SchemaTooNew(unknown)


async def pending(conn: asyncpg.Connection) -> list[str] | None:
    """This release's migrations the database lacks ('0036_idempotency_keys', …), changing nothing; None for
    a new database (no ledger). SchemaTooNew when a newer release migrated it."""
    done = await _done(conn)
    if done is None:
        return None
    _unknown(done)
    return [label(version, name) for version, name, _ in available() if version not in done]


async def migrate(conn: asyncpg.Connection, *, upto: int | None = None) -> list[int]:
    """Apply pending migrations (those up to version `upto` if given: tests start from an older schema);
    returns the versions applied by this call. SchemaTooNew, applying nothing, when a newer release migrated
    the database."""
    applied_now: list[int] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(CREATE_LEDGER)
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        _unknown(done)
        for version, name, path in available():
            if version in done or (upto is not None and version > upto):
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name
                )
            log.info("applied migration %s", label(version, name))
            applied_now.append(version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now
