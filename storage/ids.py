"""Opaque, prefixed, time-sortable identifiers (ULIDs) and opaque cursors."""

from __future__ import annotations

import base64
import binascii

import orjson
from ulid import ULID


def new_id(prefix: str) -> str:
    return f"{prefix}_{ULID()}"


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
