"""The connector interface and the shapes a connector hands to the runner."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from app.event_names import snake_case
from app.schemas import EARLIEST, FUTURE_SKEW
from app.sources.schemas import Options, Secret

if TYPE_CHECKING:
    from app.sources.netguard import NetGuard


class SourceError(Exception):
    """A failure with a reason fit for status_reason (no secrets, no stack)."""


@dataclass
class Imported:
    """One event to store: name, user (may be None), properties and event time."""

    name: str
    user_id: str | None
    properties: dict[str, Any]
    ts: datetime


@dataclass
class Batch:
    events: list[Imported] = field(default_factory=list)
    # user_id -> (traits, first seen): merged into user profiles.
    traits: dict[str, tuple[dict[str, Any], datetime]] = field(default_factory=dict)
    # The cursor once this batch is stored; committed in the same transaction as the rows.
    cursor: Any = None
    # A one-time import (no cursor column): the 8-byte digests of the rows imported with this page, kept until
    # the import is complete so that a sync cut short does not import them again (`import_done` drops them),
    # and, in a resumed import, of the rows read again and skipped as imported before the cut.
    digests_imported: bytes = b""
    digests_skipped: list[bytes] = field(default_factory=list)
    import_done: bool = False

    @property
    def size(self) -> int:
        return len(self.events) + len(self.traits)


class Sink(Protocol):
    async def commit(self, batch: Batch) -> None: ...

    async def restart_import(self) -> None:
        """A one-time import cut short reads its rows again from the first: none of those its pages kept
        (Batch.digests_imported) has been read again yet."""
        ...

    async def kept_unread(self, digests: list[bytes]) -> dict[bytes, int]:
        """Of these digests (one page's rows), how many rows with each the pages of a one-time import cut short
        kept and this sync has not read again yet."""
        ...

    async def first_seen(self, name: str, prop: str, since: datetime) -> dict[str, datetime]:
        """Of the events named `name` stored since `since` in the source's workspace and env, each value of
        their property `prop` with the earliest time it was seen (what an earlier release imported, for a
        connector that now keeps it in its cursor)."""
        ...


class Connector:
    """check() verifies credentials and reachability; sync(cursor) imports what is new since cursor,
    committing pages through the sink, and returns (rows imported, new cursor).

    Every network connection a connector makes must go through self.guard (app/sources/netguard.py):
    resolve and check with guard.resolve(), or use guard.aiohttp_connector() / guard.requests_session()."""

    def __init__(self, credentials: Secret, options: Options, sink: Sink, *, timeout: float,
                 guard: NetGuard | None = None) -> None:
        from app.sources.netguard import NetGuard

        self.credentials = credentials
        self.options = options
        self.sink = sink
        self.timeout = timeout
        self.guard = guard or NetGuard.from_environment()

    async def check(self) -> None:
        raise NotImplementedError

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        raise NotImplementedError


def event_name(value: object, default: str) -> str:
    """A label from the source (an event_column value, a table or object name) as an event name, by the
    conversion Segment's names get (app/event_names.py); `default` for NULL or a blank value, never the
    text "none"."""
    if value is None:
        return default
    return snake_case(value if isinstance(value, str) else str(jsonable(value))) or default


def utc(value: object) -> datetime | None:
    """A peer's timestamp as an aware UTC datetime (naive values are taken as UTC)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime.combine(value, time(), UTC)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return epoch(value)
    if isinstance(value, str):
        try:
            return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def epoch(value: float | Decimal) -> datetime | None:
    """An epoch number in seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude as
    ingestion APIs do (10^11 seconds is the year 5138); None when no unit makes it a date."""
    number = float(value)
    for scale in (1, 1e3, 1e6, 1e9):
        if abs(number) < 1e11 * scale:
            try:
                return datetime.fromtimestamp(number / scale, UTC)
            except (OverflowError, OSError, ValueError):
                return None
    return None


def event_time(value: object, now: datetime) -> datetime:
    """A row's event time; the import time when it has none Tally can hold: NULL, unreadable, or outside
    the keyed API's window (from 2000-01-01 to a day from now), e.g. a 9999-12-31 "never" or infinity."""
    ts = utc(value)
    return ts if ts is not None and EARLIEST <= ts <= now + FUTURE_SKEW else now


def text(value: str) -> str:
    """Text PostgreSQL can store: U+0000 (which MySQL text may hold) becomes U+FFFD, so values stay distinct."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def jsonable(value: Any) -> Any:
    """A database value as something JSON can hold."""
    if isinstance(value, str):
        return text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return duration_text(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {text(str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return str(value)


def duration_text(value: timedelta) -> str:
    """A duration as MySQL writes a TIME ("100:00:00", "-00:30:00", fractions only when present), not as
    Python's str() does ("4 days, 4:00:00")."""
    seconds, micros = divmod(abs(value) // timedelta(microseconds=1), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{'-' if value < timedelta(0) else ''}{hours:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micros:06d}" if micros else text


def rows_to_batch(rows: Iterable[dict[str, Any]], options: Options, *, default_name: str, cursor: Any,
                  key: Callable[[str], str] = str) -> Batch:
    """Rows of a table, query or object as events, by the options model every row-importing connector
    shares: event_name or event_column, user_id_column (default `user_id`), timestamp_column (default
    the cursor column, else the import time), and either the `properties` mapping or every other column.
    `key` turns a column named in options into the row's key (Snowflake folds unquoted names)."""
    user_col = key(options.user_id_column or "user_id")
    event_col = key(options.event_column) if options.event_column else None
    ts_name = options.timestamp_column or options.cursor_column
    ts_col = key(ts_name) if ts_name else None
    mapping = {name: key(column) for name, column in (options.properties or {}).items()}
    now = datetime.now(UTC)
    events = []
    for row in rows:
        # Without a name in its column, a row is named as it would be without event_column.
        name = event_name(row.get(event_col), default_name) if event_col else (options.event_name or default_name)
        user = row.get(user_col)
        ts = event_time(row.get(ts_col), now) if ts_col else now
        if options.properties is not None:
            props = {prop: jsonable(row.get(column)) for prop, column in mapping.items()}
        else:
            props = {k: jsonable(v) for k, v in row.items() if k not in (event_col, user_col)}
        events.append(Imported(name, None if user is None else text(str(user)), props, ts))
    return Batch(events=events, cursor=cursor)


def redact(text: str, secrets: list[str]) -> str:
    """Hide credential values in an error text. A secret of REDACT_ANYWHERE_MIN characters or more is
    hidden wherever it appears; a shorter one only as a whole token, so that a one-letter password
    does not turn "importing" into "im***orting"."""
    for secret in sorted(secrets, key=len, reverse=True):
        if not secret:
            continue
        if len(secret) >= REDACT_ANYWHERE_MIN:
            text = text.replace(secret, "***")
        else:
            text = re.sub(rf"(?<![0-9A-Za-z_]){re.escape(secret)}(?![0-9A-Za-z_])", "***", text)
    return text


REDACT_ANYWHERE_MIN = 8
