"""Opaque, prefixed, time-sortable identifiers and opaque cursors."""

from __future__ import annotations

import base64
import binascii
import os
import time

import orjson


def new_id(prefix: str) -> str:
    """prefix_ then a 48-bit millisecond timestamp and 80 random bits, in hex: unique without coordination
    and sortable by creation time (the ULID layout, spelled in hex, at a fraction of python-ulid's cost)."""
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


class BadCursor(ValueError):
    pass


def encode_cursor(*key: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(cursor: str, arity: int) -> list:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = orjson.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeEncodeError) as exc:
        raise BadCursor("cursor is not valid") from exc
    if not isinstance(value, list) or len(value) != arity:
        raise BadCursor("cursor is not valid")
    return value
