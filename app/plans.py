"""Rate-limit allowances per plan and endpoint group: (per second, per minute)."""

from __future__ import annotations

from collections.abc import Mapping

Limits = tuple[int, int]
GROUPS = ("events", "identify", "query", "admin")

# Free is the spec's table; pro and enterprise scale it (the spec leaves their numbers open).
FREE: dict[str, Limits] = {
    "events": (1000, 50_000),
    "identify": (500, 25_000),
    "query": (100, 3_000),
    "admin": (10, 300),
}
PLANS: dict[str, dict[str, Limits]] = {
    "free": FREE,
    "pro": {g: (s * 5, m * 5) for g, (s, m) in FREE.items()},
    "enterprise": {g: (s * 10, m * 10) for g, (s, m) in FREE.items()},
}
# Requests without a valid key are limited per client IP.
ANONYMOUS: Limits = (50, 1_000)
# The largest custom limit per window: far past any real traffic, and exact in the limiter's arithmetic, which
# counts in doubles (past 2^53 X-RateLimit-Remaining came out larger than X-RateLimit-Limit).
MAX_LIMIT = 1_000_000_000


def limits_for(plan: str, group: str, custom: Mapping[str, object] | None = None) -> Limits:
    """Enterprise workspaces may carry custom limits per group, stored as {"group": [s, m]}. Limits stored
    before set-plan bounded them: one past MAX_LIMIT counts as MAX_LIMIT, and a pair holding a value below 1
    (which refused every request) is ignored for the plan's own allowance."""
    if custom and plan == "enterprise" and group in custom:
        per_second, per_minute = (int(v) for v in custom[group])  # type: ignore[union-attr]
        if per_second >= 1 and per_minute >= 1:
            return min(per_second, MAX_LIMIT), min(per_minute, MAX_LIMIT)
    return PLANS.get(plan, FREE)[group]


def parse_limit(text: str) -> tuple[str, Limits]:
    """'events=2000/90000' -> ('events', (2000, 90000)). Each limit is 1..MAX_LIMIT: 0 would refuse every
    request (the site limits' "0 disables" does not carry over: a keyed limit is always on)."""
    group, _, value = text.partition("=")
    per_second, _, per_minute = value.partition("/")
    if group not in GROUPS or not per_second.isdigit() or not per_minute.isdigit():
        raise ValueError(f"limit must look like GROUP=PER_SECOND/PER_MINUTE with GROUP in {GROUPS}")
    limits = int(per_second), int(per_minute)
    if not all(1 <= limit <= MAX_LIMIT for limit in limits):
        raise ValueError(f"{text}: each limit must be at least 1 and at most {MAX_LIMIT} (0 would refuse every "
                         "request; to stop a workspace's calls, revoke its keys)")
    return group, limits
