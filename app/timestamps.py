"""Timestamps of the keyed API: the one parser of the ISO 8601 forms clients send (bodies, query bounds,
report configs, Segment's calls), and what an inclusive `to` covers."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

# Calendar date, then optionally a time to the hour, minute, second or a fraction, then optionally a zone;
# extended ("2026-11-25T10:00:00Z") or basic ("20261125T100000Z") format, T, t or a space between them.
# The shape is checked here because datetime.fromisoformat takes any character between date and time.
_ISO_8601 = re.compile(
    r"\d{4}-?\d{2}-?\d{2}"
    r"(?:[Tt ]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)?)?"
)
_DATE = re.compile(r"\d{4}-?\d{2}-?\d{2}")
MAX_LENGTH = 64

_REST_OF_MILLISECOND = timedelta(microseconds=999)


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 date-time as clients commonly write it: "2026-11-25T10:00:00.123Z", "2026-11-25T10:00Z"
    (no seconds), "20261125T100000Z", offsets as +02:00, +0200 or +02, "2026-11-25" (midnight). Naive when
    the text has no zone: each caller decides what that means. Fractions beyond microseconds are cut.
    ValueError for anything else, impossible dates and times (leap seconds, hour 24) included."""
    if len(text) > MAX_LENGTH or not _ISO_8601.fullmatch(text):
        raise ValueError(f"not an ISO 8601 date-time: {text[:MAX_LENGTH]!r}")
    return datetime.fromisoformat(text.upper())  # 3.11's fromisoformat wants T and Z in capitals


def has_utc_time(value: datetime) -> bool:
    """Whether a date-time with a zone is a UTC date-time too: year 1 just after midnight at +14:00 is year 0 in
    UTC and the last second of 9999 at -14:00 is year 10000, valid ISO 8601 that PostgreSQL's driver cannot
    send (its callers answered 500, or the CLI a traceback)."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True


def is_date(text: str) -> bool:
    """Whether the text is a calendar date alone ("2026-11-25", "20261125"), which parse_timestamp reads
    as that day's midnight."""
    return _DATE.fullmatch(text) is not None


def through(to: datetime) -> datetime:
    """The last instant an inclusive `to` covers, for comparing with `ts <=`. The API writes every
    timestamp with milliseconds while events keep microseconds, so a `to` of whole milliseconds covers
    its whole millisecond: the event listed at T is matched by to=T. A `to` with finer digits is exact."""
    return to if to.microsecond % 1000 else to + _REST_OF_MILLISECOND
