"""Report request bodies and per-type configs, validated with msgspec (errors name the field)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from app.bodies import field_error, field_of, not_blank
from app.responses import invalid, iso_exact
from app.schemas import EventName
from app.timestamps import is_date, parse_timestamp, through

ReportType = Literal["event_volume", "funnel", "retention", "custom"]
# NUL characters cannot be stored in PostgreSQL text or jsonb; every free-text field excludes them.
Name = Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
# At a domain name: no address literal ([10.0.0.5]) and no IP address as the domain (its last label would
# be digits), which would have the mail server connect wherever a tenant says, internal networks included.
_EMAIL = r"^[^@\s<>,;\x00]+@[^@\s<>,;\x00\[\]]+\.[^0-9@\s<>,;\x00\[\].][^@\s<>,;\x00\[\].]*\Z"
Email = Annotated[str, Meta(max_length=254, pattern=_EMAIL)]
# "properties.plan" (event property, dots for nesting), "traits.plan" (user trait), or a bare property name;
# no key may be empty ("traits." would group every event under null). A key may hold spaces ("Plan Type"), but
# not begin or end with one, which would be a typo grouping every event under null too.
_KEY = r"[^.\s\x00](?:[^.\x00]*[^.\s\x00])?"
GroupBy = Annotated[str, Meta(min_length=1, max_length=200, pattern=rf"^{_KEY}(?:\.{_KEY})*\Z")]
Timestamp = Annotated[datetime, Meta(tz=True, description="ISO 8601 with Z or an offset, or a date alone (UTC "
                                                          "midnight; a `to` covers that instant, not the day)")]

DEFAULT_RANGE = timedelta(days=30)
EARLIEST, LATEST = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
MAX_BUCKETS = 10_000
# A grouped event-volume or funnel report keeps this many groups, the largest (by count; by users entering step 1),
# and folds the rest into one "(other)" group (storage/report_queries.OTHER); a config may ask for up to
# MAX_GROUPS (docs/decisions.md).
DEFAULT_GROUPS, MAX_GROUPS = 50, 1000
INTERVALS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


class _Ranged(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """from/to are optional: without them a run covers the 30 days before `to` (default: now),
    which is what a scheduled report wants."""

    from_: Timestamp | None = msgspec.field(default=None, name="from")
    to: Timestamp | None = None

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        """[start, end] to compare with `ts >=` and `ts <=`: `to` covers its millisecond (app/timestamps.py)."""
        end = self.to or now
        return self.from_ or end - DEFAULT_RANGE, through(end)

    def _check_range(self) -> None:
        for name, value in (("from", self.from_), ("to", self.to)):
            if value is not None and not EARLIEST <= value <= LATEST:
                raise field_error(name, f"{name} must be between 2000-01-01 and 2100-01-01")
        if self.from_ and self.to and self.from_ >= self.to:
            raise field_error("from", "from must be before to")


class EventVolumeConfig(_Ranged):
    events: Annotated[list[EventName], Meta(min_length=1, max_length=20)]
    interval: Literal["hour", "day", "week"] = "day"
    group_by: GroupBy | None = None
    group_limit: Annotated[int, Meta(ge=1, le=MAX_GROUPS, description=(
        "with group_by: the groups kept, the largest by count over the range and all events; the rest are "
        "summed into one group named \"(other)\" (the run's other_groups says how many values it holds)"))] = (
        DEFAULT_GROUPS)

    def __post_init__(self) -> None:
        self._check_range()
        # Checked at every run too (runs parse the stored config): without `to` the range grows with now, so an
        # hourly report passes the cap some 416 days after its `from`, and `from` is what to change.
        start, end = self.window(datetime.now(UTC))
        if (end - start) / INTERVALS[self.interval] > MAX_BUCKETS:
            if self.from_ is not None and self.to is None:
                raise field_error("from", f"more than {MAX_BUCKETS} {self.interval} buckets from `from` to now "
                                          "(to defaults to now); give a later from, a to, or a wider interval")
            raise field_error("interval", f"more than {MAX_BUCKETS} {self.interval} buckets; use a wider interval")


class FunnelConfig(_Ranged):
    events: Annotated[list[EventName], Meta(min_length=2, max_length=10)]
    conversion_window_days: Annotated[int, Meta(ge=1, le=365)] = 7
    group_by: GroupBy | None = None
    group_limit: Annotated[int, Meta(ge=1, le=MAX_GROUPS, description=(
        "with group_by: the groups kept, the largest by users entering step 1; the rest are summed into one group "
        "named \"(other)\" (the run's other_groups says how many values it holds)"))] = DEFAULT_GROUPS

    def __post_init__(self) -> None:
        self._check_range()


class RetentionConfig(_Ranged):
    """start_event/return_event, or the spec's generic events: [start_event, return_event]. The config is
    echoed in the form it was sent (see config_json)."""

    start_event: EventName | None = None
    return_event: EventName | None = None
    events: Annotated[list[EventName], Meta(min_length=2, max_length=2)] | None = None
    period: Literal["day", "week"] = "day"
    periods: Annotated[int, Meta(ge=1, le=52)] = 8

    def __post_init__(self) -> None:
        self._check_range()
        if self.events is not None:
            if self.start_event is not None or self.return_event is not None:
                raise field_error("events", "give either events or start_event and return_event, not both")
            self.start_event, self.return_event = self.events
            return
        for name in ("start_event", "return_event"):
            if getattr(self, name) is None:
                raise field_error(name, f"{name} is required (or events: [start_event, return_event])")

    def echo(self) -> dict[str, Any]:
        out = msgspec.to_builtins(self)
        for name in ("start_event", "return_event") if self.events is not None else ("events",):
            out.pop(name, None)
        return out


class CustomConfig(msgspec.Struct, forbid_unknown_fields=True):
    sql: Annotated[str, Meta(min_length=1, max_length=20_000, pattern=r"^[^\x00]+$")]

    def __post_init__(self) -> None:
        if not self.sql.strip().rstrip(";").strip():
            raise field_error("sql", "sql is empty")


CONFIGS: dict[str, type[msgspec.Struct]] = {
    "event_volume": EventVolumeConfig,
    "funnel": FunnelConfig,
    "retention": RetentionConfig,
    "custom": CustomConfig,
}


class Schedule(msgspec.Struct, forbid_unknown_fields=True):
    frequency: Literal["daily", "weekly", "monthly"]
    recipients: Annotated[list[Email], Meta(min_length=1, max_length=50)]
    format: Literal["pdf", "csv"] = "csv"


class ReportIn(msgspec.Struct, forbid_unknown_fields=True):
    name: Name
    type: ReportType
    config: dict[str, Any]
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        not_blank("name", self.name)


class ReportPatch(msgspec.Struct, forbid_unknown_fields=True):
    """Fields present replace the stored ones; schedule null removes the schedule. name, type and config
    are required fields, so null for one is a 400 naming it rather than "leave it as it is"."""

    name: Name | msgspec.UnsetType = msgspec.UNSET
    type: ReportType | msgspec.UnsetType = msgspec.UNSET
    config: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    schedule: Schedule | msgspec.UnsetType | None = msgspec.UNSET

    def __post_init__(self) -> None:
        not_blank("name", self.name)


def _bounds_parsed(config: dict[str, Any]) -> dict[str, Any]:
    """from/to read by app/timestamps.py, as event timestamps are (msgspec's own parser takes RFC 3339 only);
    the Struct then checks them as datetimes (the range). A date alone is UTC midnight, as in chart data's and
    GET /v1/events' bounds; a date-time needs a zone: a saved report re-runs it for months, and a client's
    local time would shift every run without a word."""
    parsed = dict(config)
    for name in ("from", "to"):
        text = parsed.get(name)
        if not isinstance(text, str):
            continue
        field = f"config.{name}"
        try:
            value = parse_timestamp(text)
        except ValueError:
            raise invalid(f"{field}: not an ISO 8601 date-time",
                          fields=[{"field": field, "message": "not an ISO 8601 date-time"}]) from None
        if value.tzinfo is None:
            if not is_date(text):
                message = "a date-time needs Z or an offset (a date alone is UTC midnight)"
                raise invalid(f"{field}: {message}", fields=[{"field": field, "message": message}])
            value = value.replace(tzinfo=UTC)
        parsed[name] = value
    return parsed


def parse_config(report_type: str, config: dict[str, Any]) -> msgspec.Struct:
    """Validate a stored or submitted config for its type; 400 naming config.<field> otherwise."""
    try:
        # Strict: "7" is not read as 7 (from/to are datetimes already), as no other body of the API does.
        return msgspec.convert(_bounds_parsed(config), CONFIGS[report_type])
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        field = f"config.{field}" if field else "config"
        raise invalid(f"{field}: {message}", fields=[{"field": field, "message": message}]) from None


def _utc_text(value: datetime) -> str:
    """A bound as the API writes timestamps (UTC, Z, milliseconds, finer digits kept: a `to` with them is exact),
    without a fraction when it has none, as configs have always come back."""
    value = value.astimezone(UTC)
    return value.isoformat(timespec="seconds")[:-6] + "Z" if not value.microsecond else iso_exact(value)


def config_json(config: msgspec.Struct) -> dict[str, Any]:
    """The normalised config as stored and returned (defaults filled in, timestamps ISO 8601 in UTC), keeping
    the form it was sent in (a retention config sent with events comes back with events)."""
    out = config.echo() if isinstance(config, RetentionConfig) else msgspec.to_builtins(config)
    if isinstance(config, _Ranged):
        for name, value in (("from", config.from_), ("to", config.to)):
            if value is not None:
                out[name] = _utc_text(value)
    return out
