"""The asyncpg pool, with binary JSON codecs that use orjson (binary so COPY can carry jsonb)."""

from __future__ import annotations

import asyncpg
import orjson


def _encode_jsonb(value: object) -> bytes:
    return b"\x01" + orjson.dumps(value)  # jsonb binary format: version byte, then the text


def _decode_jsonb(data: bytes) -> object:
    return orjson.loads(data[1:])


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=_encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "json", encoder=orjson.dumps, decoder=orjson.loads, schema="pg_catalog", format="binary"
    )


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=init_connection, command_timeout=60
    )
