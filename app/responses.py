"""JSON responses and the two error shapes: /v1 nests {code, message}, /api is flat.

Encoded with msgspec, like the jsonb codec, so every stored value (integers beyond 64 bits included)
can be served back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

_encode = msgspec.json.encode


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_encode(data), status=status, headers=headers, content_type="application/json"
    )


def iso_ms(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with milliseconds and a Z suffix."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="milliseconds")[:-6] + "Z"  # drop "+00:00"


def iso_exact(value: datetime) -> str:
    """As iso_ms, with microseconds when the value has digits finer than the millisecond (a custom SQL result),
    so that writing it loses nothing."""
    if value.microsecond % 1000 == 0:
        return iso_ms(value)
    return value.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


class ApiError(Exception):
    """A keyed-API failure: rendered as {"error": {"code", "message", ...}}."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> web.Response:
        body = {"code": self.code, "message": self.message, **self.extra}
        return json_response({"error": body}, self.status, self.headers)


def invalid(message: str, **extra: Any) -> ApiError:
    return ApiError(400, "invalid_request", message, **extra)


def not_found(message: str = "not found") -> ApiError:
    return ApiError(404, "not_found", message)


class SiteError(Exception):
    """A site-API failure: rendered as {"error": "<message>", ...}."""

    # The tally_events_rejected_total reason an ingestion endpoint counts for this failure, if any.
    rejected: str | None = None

    def __init__(self, status: int, error: str, *, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(error)
        self.status = status
        self.error = error
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> web.Response:
        return json_response({"error": self.error, **self.extra}, self.status, self.headers)


def issue(field: str, message: str) -> dict[str, str]:
    """One of a site-API 400's `issues`: the field it names ('' for the body as a whole) and what is wrong."""
    return {"field": field, "message": message}


def invalid_payload(issues: list[dict[str, str]]) -> SiteError:
    """The site API's 400 for a body that decodes but does not hold: {"error": "invalid payload", "issues"}."""
    return SiteError(400, "invalid payload", issues=issues)
