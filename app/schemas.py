"""Request bodies of the keyed API, validated by msgspec on the hot path."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from app.timestamps import MAX_LENGTH, parse_timestamp

# snake_case, as the spec names events. \Z, not $: Python's $ also matches before a final newline, so msgspec
# took "signup\n" (and stored it as sent). JSON Schema's $ (ECMA) does not, so the OpenAPI spells it $.
EVENT_NAME = r"^[a-z][a-z0-9_]*\Z"
EventName = Annotated[str, Meta(min_length=1, max_length=128, pattern=EVENT_NAME)]
_EVENT_NAME = re.compile(EVENT_NAME)
Identifier = Annotated[str, Meta(min_length=1, max_length=255)]
# Decoded as text and parsed by app/timestamps.py, which takes more of ISO 8601 than msgspec's RFC 3339.
TimestampText = Annotated[str, Meta(max_length=MAX_LENGTH)]

MAX_BATCH = 1000
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
FUTURE_SKEW = timedelta(days=1)


def body_timestamp(text: str | None, field: str = "timestamp") -> datetime | None:
    """A body's timestamp: ISO 8601 with a timezone, between 2000-01-01 and one day from now. Raised as
    msgspec reports a ValueError of __post_init__ with this suffix: as the failing field."""
    if text is None:
        return None
    try:
        value = parse_timestamp(text)
    except ValueError:
        raise ValueError(f"{field} must be an ISO 8601 date-time - at `$.{field}`") from None
    if value.tzinfo is None:
        raise ValueError(f"{field} must carry a timezone (Z or an offset) - at `$.{field}`")
    if value < EARLIEST or value > datetime.now(UTC) + FUTURE_SKEW:
        raise ValueError(f"{field} must be between 2000-01-01 and one day from now - at `$.{field}`")
    return value


def check_event_name(name: str) -> None:
    """EventName's rule, with words for the two near misses a regex message does not explain: a blank name,
    and whitespace around a name, which is refused rather than trimmed (names are kept as sent)."""
    if _EVENT_NAME.match(name):
        return
    if not name.strip():
        raise ValueError("the event name is blank - at `$.event`")
    if name != name.strip():
        raise ValueError("the event name starts or ends with whitespace; names are kept as sent, not trimmed "
                         "- at `$.event`")
    raise ValueError("the event name must be snake_case (^[a-z][a-z0-9_]*$) - at `$.event`")


class EventIn(msgspec.Struct, dict=True):
    """dict=True holds `at`, the parsed timestamp, beside the fields. The name is checked by check_event_name
    (EventName's rule, explained)."""

    event: Annotated[str, Meta(max_length=128)]
    user_id: Identifier | None = None
    anonymous_id: Identifier | None = None
    properties: dict[str, Any] | None = {}  # null means none, as for the other optional fields
    timestamp: TimestampText | None = None  # as sent; `at` is its time

    def __post_init__(self) -> None:
        check_event_name(self.event)
        if self.user_id is None and self.anonymous_id is None:
            raise ValueError("one of user_id or anonymous_id is required - at `$.user_id`")
        if self.properties is None:
            self.properties = {}
        self.at = body_timestamp(self.timestamp)


class BatchIn(msgspec.Struct):
    # Items stay raw so that each is validated on its own and one bad item fails only itself.
    events: list[msgspec.Raw]


class IdentifyIn(msgspec.Struct, dict=True):
    user_id: Identifier
    traits: dict[str, Any] | None = {}  # null means none, as for the other optional fields
    # The id the client sent events under before it knew the user: merged into the user, as an alias.
    anonymous_id: Identifier | None = None
    timestamp: TimestampText | None = None  # as sent; `at` is its time

    def __post_init__(self) -> None:
        if self.traits is None:
            self.traits = {}
        self.at = body_timestamp(self.timestamp)
