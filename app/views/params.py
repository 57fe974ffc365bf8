"""Query-string parsing of the keyed API's list endpoints (integers through app/input_rules.py)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from app.input_rules import NotAnInteger, OutOfRange, query_int, storable_text
from app.responses import invalid, json_response
from app.timestamps import has_utc_time, parse_timestamp
from storage.ids import BadCursor, decode_cursor, encode_cursor


def int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    try:
        return query_int(request.query.get(name), default, lo, hi)
    except NotAnInteger:
        raise invalid(f"{name} must be an integer", fields=[{"field": name, "message": "not an integer"}]) from None
    except OutOfRange:
        raise invalid(f"{name} must be between {lo} and {hi}",
                      fields=[{"field": name, "message": f"out of range {lo}..{hi}"}]) from None


def storable_param(field: str, value: str) -> str:
    """A query value that reaches SQL: text PostgreSQL cannot hold (app/input_rules.py) is a 400 naming
    the parameter (a U+0000 in its name written out, so the answer shows where it was)."""
    if not storable_text(value) or not storable_text(field):
        shown = field.replace("\x00", "\\u0000")
        raise invalid(f"{shown}: text may not contain the NUL character (\\u0000)",
                      fields=[{"field": shown, "message": "contains U+0000"}])
    return value


def text_param(request: web.Request, name: str) -> str | None:
    """A text filter: None when absent or empty."""
    value = request.query.get(name)
    return storable_param(name, value) if value else None


# A time, then a space, then an offset: the `+` of "…T10:00:00+02:00" sent unencoded in a query string
# arrives as a space (form encoding). After a time nothing else can follow, so it is read as the `+`.
_PLUS_AS_SPACE = re.compile(r"(.+[Tt ]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?) (\d{2}(?::?\d{2})?)")


def time_param(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    if plus := _PLUS_AS_SPACE.fullmatch(raw):
        raw = f"{plus.group(1)}+{plus.group(2)}"
    try:
        value = parse_timestamp(raw)
    except ValueError:
        raise invalid(f"{name} must be an ISO 8601 timestamp",
                      fields=[{"field": name, "message": "not ISO 8601"}]) from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # a bound without a zone is UTC (spec §1)
    if not has_utc_time(value):
        raise invalid(f"{name} is out of range", fields=[{"field": name, "message": "out of range"}])
    return value


# A position in a bigserial: what an integer in a cursor can be (a bool is an int to Python, not to a cursor).
_POSITION = range(0, 2**63)


def _cursor_value_fits(value: object, kind: type) -> bool:
    if kind is int:
        return type(value) is int and value in _POSITION
    return isinstance(value, kind) and (not isinstance(value, str) or storable_text(value))


def cursor_param(request: web.Request, *types: type) -> list | None:
    """Decode ?cursor= into values of the given types (None when absent); anything else, an integer the
    service could not have written included, is a 400."""
    raw = request.query.get("cursor")
    if not raw:
        return None
    try:
        values = decode_cursor(raw, len(types))
    except BadCursor:
        values = None
    if values is None or not all(_cursor_value_fits(v, t) for v, t in zip(values, types, strict=True)):
        raise invalid("cursor is not valid", fields=[{"field": "cursor", "message": "not valid"}])
    return values


def page_response(rows: Sequence, limit: int, render: Callable[[Any], dict],
                  cursor_of: Callable[[Any], tuple]) -> web.Response:
    """The list shape of the keyed API, from rows fetched with limit + 1 to learn whether more exist."""
    has_more = len(rows) > limit
    rows = rows[:limit]
    return json_response({
        "data": [render(r) for r in rows],
        "next_cursor": encode_cursor(*cursor_of(rows[-1])) if has_more else None,
        "has_more": has_more,
    })
