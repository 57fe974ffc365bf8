"""The time zones a site may have: IANA names (`Europe/Berlin`, `America/New_York`, `UTC`), as Plausible's
sites take them. A site's days begin at its zone's midnight (app/views/analytics_params.py)."""

from __future__ import annotations

from zoneinfo import available_timezones

DEFAULT = "UTC"
# `localtime` is the server's own zone, not one a site could mean; `posix/` and `right/` are copies of the
# others (right/ counts leap seconds, which the analytics store does not know).
ZONES = frozenset(name for name in available_timezones()
                  if name != "localtime" and not name.startswith(("posix/", "right/"))) | {DEFAULT}


def is_time_zone(value: object) -> bool:
    """Whether `value` names a zone a site may have (case matters, as in the IANA database)."""
    return isinstance(value, str) and value in ZONES
