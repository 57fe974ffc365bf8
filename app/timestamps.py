"""Timestamps of the keyed API: what an inclusive `to` covers."""

from __future__ import annotations

from datetime import datetime, timedelta

_REST_OF_MILLISECOND = timedelta(microseconds=999)


def through(to: datetime) -> datetime:
    """The last instant an inclusive `to` covers, for comparing with `ts <=`. The API writes every
    timestamp with milliseconds while events keep microseconds, so a `to` of whole milliseconds covers
    its whole millisecond: the event listed at T is matched by to=T. A `to` with finer digits is exact."""
    return to if to.microsecond % 1000 else to + _REST_OF_MILLISECOND
