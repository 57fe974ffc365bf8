"""Request bodies of the keyed API, validated by msgspec on the hot path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec
from msgspec import Meta

EventName = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[a-z][a-z0-9_]*$")]
Identifier = Annotated[str, Meta(min_length=1, max_length=255)]
Timestamp = Annotated[datetime, Meta(tz=True)]

MAX_BATCH = 1000
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
FUTURE_SKEW = timedelta(days=1)


def check_timestamp(value: datetime | None) -> None:
    if value is None:
        return
    if value < EARLIEST or value > datetime.now(UTC) + FUTURE_SKEW:
        raise ValueError("timestamp must be between 2000-01-01 and one day from now - at `$.timestamp`")


class EventIn(msgspec.Struct):
    event: EventName
    user_id: Identifier | None = None
    anonymous_id: Identifier | None = None
    properties: dict[str, Any] = {}
    timestamp: Timestamp | None = None

    def __post_init__(self) -> None:
        if self.user_id is None and self.anonymous_id is None:
            raise ValueError("one of user_id or anonymous_id is required - at `$.user_id`")
        check_timestamp(self.timestamp)


class BatchIn(msgspec.Struct):
    # Items stay raw so that each is validated on its own and one bad item fails only itself.
    events: list[msgspec.Raw]


class IdentifyIn(msgspec.Struct):
    user_id: Identifier
    traits: dict[str, Any] = {}
    timestamp: Timestamp | None = None

    def __post_init__(self) -> None:
        check_timestamp(self.timestamp)
