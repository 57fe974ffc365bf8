"""Advisory locks that let one process of many run a scheduled job's round."""

from __future__ import annotations

import zlib

import asyncpg


def job_lock_key(name: str) -> int:
    return zlib.crc32(f"tally-job:{name}".encode())


async def try_lock(conn: asyncpg.Connection, key: int) -> bool:
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", key))


async def unlock(conn: asyncpg.Connection, key: int) -> None:
    await conn.execute("SELECT pg_advisory_unlock($1)", key)
