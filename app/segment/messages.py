"""Segment messages (Segment's own field names) and their mapping onto Tally's events and profiles.

Each message becomes one operation for the workspace actor, tagged with its source and messageId so the
actor can drop messages it has already stored (see actors.workspace and storage.segment).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import msgspec

from actors.workspace import OP_ALIAS, OP_EVENT, OP_TRAITS
from app.event_names import snake_case
from app.input_rules import MAX_DEPTH, decode_json, problem
from app.schemas import EARLIEST, FUTURE_SKEW, TimestampText
from app.timestamps import parse_timestamp
from storage.events import EventRow
from storage.ids import new_id

CALL_LIMIT = 32 * 1024  # Segment: 32 KB per call, and per message inside a batch
BATCH_LIMIT = 500 * 1024  # Segment: 500 KB per batch
MAX_ID = 255
MAX_MESSAGE_ID = 255

TYPES = ("track", "identify", "page", "screen", "group", "alias")
SHORT_PATHS = {"t": "track", "i": "identify", "p": "page", "s": "screen", "g": "group", "a": "alias"}


Id = str | int | float  # Segment accepts numbers for ids; stored as text


def _segment_time(text: str | None, field: str) -> datetime | None:
    """A Segment time by the keyed API's parser (app/timestamps.py); without a zone it is UTC, as before."""
    if text is None:
        return None
    try:
        value = parse_timestamp(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 date-time - at `$.{field}`") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class Message(msgspec.Struct, dict=True):
    """One Segment call. Unknown fields are ignored, as Segment does. dict=True holds `at` and `sent_at`,
    timestamp and sentAt parsed."""

    type: str | None = None
    userId: Id | None = None
    anonymousId: Id | None = None
    event: str | None = None
    name: str | None = None
    category: str | None = None
    properties: dict[str, Any] | None = None
    traits: dict[str, Any] | None = None
    # Accepted and not stored (see docs/decisions.md); left raw, so they cost no parsing.
    context: msgspec.Raw = msgspec.Raw()
    timestamp: TimestampText | None = None
    sentAt: TimestampText | None = None
    messageId: str | None = None
    integrations: msgspec.Raw = msgspec.Raw()
    groupId: Id | None = None
    previousId: Id | None = None
    writeKey: str | None = None

    def __post_init__(self) -> None:
        self.at = _segment_time(self.timestamp, "timestamp")
        self.sent_at = _segment_time(self.sentAt, "sentAt")


class Batch(msgspec.Struct, dict=True):
    # Items stay raw: each is size-checked and validated on its own, so one bad message fails only itself.
    batch: list[msgspec.Raw]
    sentAt: TimestampText | None = None  # `sent_at` parsed
    writeKey: str | None = None
    context: dict[str, Any] | None = None
    integrations: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.sent_at = _segment_time(self.sentAt, "sentAt")


class Invalid(ValueError):
    """A message Segment would reject; the text names the field."""


def event_name(text: str) -> str:
    """A track call's event name as Tally's snake_case (app/event_names.py); a blank one is refused."""
    name = snake_case(text)
    if name is None:
        raise Invalid("event: the event name is blank")
    return name


def _id(value: Id | None, field: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise Invalid(f"{field}: expected a string")
    text = value if isinstance(value, str) else (str(int(value)) if value == int(value) else str(value))
    if len(text) > MAX_ID:
        raise Invalid(f"{field}: longer than {MAX_ID} characters")
    return text


def event_time(msg: Message, batch_sent_at: datetime | None, received: datetime) -> datetime:
    """Segment's clock-skew correction: the device's clock is trusted for the gap between the event and
    the send, the server's for the send itself: timestamp = receivedAt - (sentAt - timestamp)."""
    if msg.at is None:
        return received
    stamp = msg.at
    sent = msg.sent_at or batch_sent_at
    if sent is not None:
        try:
            stamp = received - (sent - stamp)
        except OverflowError:
            raise Invalid("timestamp: too far from sentAt") from None
    if stamp < EARLIEST or stamp > received + FUTURE_SKEW:
        raise Invalid("timestamp: must be between 2000-01-01 and one day from now")
    return stamp


def to_op(msg: Message, kind: str, source: tuple[str, int, str], batch_sent_at: datetime | None,
          received: datetime) -> tuple:
    """One message as an actor operation; raises Invalid for what Segment itself would not accept."""
    source_id, workspace_id, env = source
    message_id = msg.messageId or None
    if message_id is not None and len(message_id) > MAX_MESSAGE_ID:
        raise Invalid(f"messageId: longer than {MAX_MESSAGE_ID} characters")
    user_id = _id(msg.userId, "userId")
    anonymous_id = _id(msg.anonymousId, "anonymousId")
    if kind == "alias":
        previous = _id(msg.previousId, "previousId")
        if previous is None or user_id is None:
            raise Invalid("alias needs previousId and userId")
        return (source_id, message_id, OP_ALIAS, (previous, user_id, received))
    if user_id is None and anonymous_id is None:
        raise Invalid("userId: one of userId or anonymousId is required")
    ts = event_time(msg, batch_sent_at, received)
    if kind == "identify":
        return (source_id, message_id, OP_TRAITS, (user_id or anonymous_id, msg.traits or {}, ts, received))
    if kind == "group":
        group_id = _id(msg.groupId, "groupId")
        if group_id is None:
            raise Invalid("groupId: required for group calls")
        return (source_id, message_id, OP_TRAITS,
                (user_id or anonymous_id, {"group": {"id": group_id, **(msg.traits or {})}}, ts, received))
    if kind == "track":
        if not msg.event:
            raise Invalid("event: required for track calls")
        name, properties = event_name(msg.event), msg.properties or {}
    elif kind in ("page", "screen"):
        name, properties = f"{kind}_viewed", dict(msg.properties or {})
        if msg.name is not None:
            properties["name"] = msg.name
        if msg.category is not None:
            properties["category"] = msg.category
    else:
        raise Invalid(f"type: must be one of {', '.join(TYPES)}")
    row = EventRow(new_id("evt"), workspace_id, env, name, ts, received, user_id=user_id,
                   anonymous_id=anonymous_id, properties=properties)
    return (source_id, message_id, OP_EVENT, row)


def decode_message(raw: bytes) -> Message:
    try:
        msg = decode_json(raw, type=Message)
    except msgspec.ValidationError as exc:
        raise Invalid(field_message(exc)) from None
    except (msgspec.DecodeError, RecursionError):
        raise Invalid("the message is not valid JSON (or nests too deeply)") from None
    check_nul(raw, msg)
    return msg


def field_message(exc: msgspec.ValidationError) -> str:
    """msgspec's 'Expected `str`, got `int` - at `$.event`' as 'event: Expected `str`, got `int`'."""
    text = str(exc)
    message, _, path = text.partition(" - at `$")
    path = path.rstrip("`").lstrip(".")
    return f"{path}: {message}" if path else message


def check_nul(raw: bytes, value: object) -> None:
    """What PostgreSQL cannot store (app/input_rules.py), in Segment's words."""
    found = problem(raw, value)
    if found is not None:
        field, kind = found
        if kind == "nul":
            raise Invalid(f"{field}: text may not contain the NUL character (\\u0000)")
        raise Invalid(f"{field}: nests deeper than {MAX_DEPTH} levels")
