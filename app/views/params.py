"""Query-string parsing shared by list endpoints."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from app.responses import invalid


def int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"{name} must be an integer", fields=[{"field": name, "message": "not an integer"}]) from None
    if not lo <= value <= hi:
        raise invalid(f"{name} must be between {lo} and {hi}",
                      fields=[{"field": name, "message": f"out of range {lo}..{hi}"}])
    return value


def time_param(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise invalid(f"{name} must be an ISO 8601 timestamp",
                      fields=[{"field": name, "message": "not ISO 8601"}]) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
