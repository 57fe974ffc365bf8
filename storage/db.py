"""The asyncpg pool, with binary JSON codecs (binary so COPY can carry jsonb).

msgspec rather than orjson: it round-trips integers beyond 64 bits, which JSON allows, jsonb stores as
numeric, and orjson refuses.
"""

from __future__ import annotations

import asyncpg
import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def _encode_jsonb(value: object) -> bytes:
    return b"\x01" + _encode(value)  # jsonb binary format: version byte, then the text


def _decode_jsonb(data: bytes) -> object:
    return _decode(data[1:])


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=_encode_jsonb, decoder=_decode_jsonb, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "json", encoder=_encode, decoder=_decode, schema="pg_catalog", format="binary"
    )


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=init_connection, command_timeout=60
    )
