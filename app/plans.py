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


def limits_for(plan: str, group: str, custom: Mapping[str, object] | None = None) -> Limits:
    """Enterprise workspaces may carry custom limits per group, stored as {"group": [s, m]}."""
    if custom and plan == "enterprise" and group in custom:
        per_second, per_minute = custom[group]  # type: ignore[misc]
        return int(per_second), int(per_minute)
    return PLANS.get(plan, FREE)[group]


def parse_limit(text: str) -> tuple[str, Limits]:
    """'events=2000/90000' -> ('events', (2000, 90000))."""
    group, _, value = text.partition("=")
    per_second, _, per_minute = value.partition("/")
    if group not in GROUPS or not per_second.isdigit() or not per_minute.isdigit():
        raise ValueError(f"limit must look like GROUP=PER_SECOND/PER_MINUTE with GROUP in {GROUPS}")
    return group, (int(per_second), int(per_minute))
