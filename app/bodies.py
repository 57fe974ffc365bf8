"""Reading and decoding request bodies with msgspec, turning its errors into 400s."""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec
from aiohttp import web

from app.responses import ApiError, invalid

T = TypeVar("T")

_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_MISSING = re.compile(r"missing required field `([^`]+)`")


async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, "payload_too_large", f"request body exceeds {limit} bytes")
    # request.read() gathers every chunk of a chunked body and stops at the app's client_max_size.
    body = await request.read()
    if len(body) > limit:
        raise ApiError(413, "payload_too_large", f"request body exceeds {limit} bytes")
    return body


def field_of(error: msgspec.ValidationError) -> tuple[str, str]:
    """Split msgspec's 'Expected `str`, got `int` - at `$.event`' into (field, message)."""
    text = str(error)
    match = _PATH.search(text)
    prefix, message = ("", text) if not match else (match.group(1), text[: match.start()])
    missing = _MISSING.search(message)
    if missing:
        return ".".join(p for p in (prefix, missing.group(1)) if p), message
    return prefix, message


def find_nul(value: object, path: str = "") -> str | None:
    """Path of the first string (or key) holding U+0000, which PostgreSQL text and jsonb cannot store."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return f"{path}.{key!r}".lstrip(".")
            found = find_nul(item, f"{path}.{key}")
            if found is not None:
                return found.lstrip(".")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_nul(item, f"{path}[{index}]")
            if found is not None:
                return found
    elif isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            found = find_nul(getattr(value, field), f"{path}.{field}")
            if found is not None:
                return found.lstrip(".")
    return None


def reject_nul(body: bytes, value: object) -> None:
    # The byte scan is cheap; the walk runs only for bodies that spell the escape.
    if b"\\u0000" in body:
        field = find_nul(value)
        if field is not None:
            raise invalid(f"{field}: text may not contain the NUL character (\\u0000)",
                          fields=[{"field": field, "message": "contains U+0000"}])


def decode(body: bytes, schema: type[T]) -> T:
    try:
        value = msgspec.json.decode(body, type=schema)
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        raise invalid(
            f"{field}: {message}" if field else message, fields=[{"field": field, "message": message}]
        ) from None
    except (msgspec.DecodeError, RecursionError):
        raise invalid("request body is not valid JSON (or nests too deeply)") from None
    reject_nul(body, value)
    return value
