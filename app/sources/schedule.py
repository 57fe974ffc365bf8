"""When a source syncs next: hourly on the hour, daily at HH:MM UTC, weekly on Mondays at HH:MM UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def next_sync(frequency: str, hhmm: str, after: datetime) -> datetime:
    """The first scheduled moment strictly after `after`."""
    after = after.astimezone(UTC)
    if frequency == "hourly":
        return after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    hour, minute = (int(p) for p in hhmm.split(":"))
    at = after.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if frequency == "weekly":
        at -= timedelta(days=at.weekday())  # Monday of this week
        return at if at > after else at + timedelta(days=7)
    return at if at > after else at + timedelta(days=1)
