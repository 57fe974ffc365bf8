"""Reading and decoding request bodies with msgspec, turning its errors into 400s."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import msgspec
from aiohttp import web

from app.appkeys import SETTINGS
from app.input_rules import MAX_DEPTH, decode_json, problem
from app.responses import ApiError, SiteError, invalid

T = TypeVar("T")

_PATH = re.compile(r"(?: - at `\$\.?[^`]*`)+$")
_PATH_PART = re.compile(r" - at `\$\.?([^`]*)`")
_MISSING = re.compile(r"missing required field `([^`]+)`")
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")


def unreadable(request: web.Request) -> dict[str, str]:
    """The headers of an answer to a body that did not decode by its Content-Encoding, or was cut short.
    Once the answer is sent aiohttp's server would read the rest of the body, meet the same error again and
    log it as an unhandled exception: the body is marked ended, so it does not, and the answer closes the
    connection, whose stream is past use."""
    request.content.feed_eof()
    return {"Connection": "close"}


# The content codings aiohttp's parser decodes (br through Brotli, zstd through backports.zstd or the
# standard library: both are dependencies so that every one of them is); any other it passes on as is.
CONTENT_CODINGS = ("gzip", "deflate", "br", "zstd")
INVALID_SITE_BODY = "invalid request body"


async def read_limited(request: web.Request, limit: int, too_large: Callable[[], Exception]) -> bytes:
    """The body, or `too_large()` as soon as more than `limit` bytes of it are known. A chunked or compressed
    body is read as it arrives: request.read() gathers up to the app's 8 MB before any check, and a gzip
    body of a few KB decodes to that much, so a client sending the start of one and then nothing held 8 MB
    of the process per connection, without a key or a session. A body that has not all arrived within
    TALLY_BODY_TIMEOUT_SECONDS is a 408 (see body_deadline). aiohttp's RequestPayloadError (a body not in its
    Content-Encoding, or cut short) is left to the caller."""
    length = request.content_length
    if length is not None and length > limit:
        raise too_large()
    if request.content.is_eof():  # arrived with its headers, as most do: no deadline to arm (ingestion's path)
        return await _read_up_to(request, length, limit, too_large)
    async with body_deadline(request):
        return await _read_up_to(request, length, limit, too_large)


async def _read_up_to(request: web.Request, length: int | None, limit: int,
                      too_large: Callable[[], Exception]) -> bytes:
    if length is not None and request.headers.get("Content-Encoding", "identity").strip().lower() == "identity":
        return await request.read()  # the HTTP parser ends the body at its Content-Length
    # StreamReader.read(n) returns what has arrived so far, decoded: read until EOF or past the limit.
    body = bytearray()
    while chunk := await request.content.read(limit + 1 - len(body)):
        body += chunk
        if len(body) > limit:
            raise too_large()
    return bytes(body)


@asynccontextmanager
async def body_deadline(request: web.Request) -> AsyncIterator[None]:
    """Reading a body within the deadline, else 408 with the connection closed. Without it a client sending a
    body slowly, or part of one and then nothing, held its connection and handler for as long as it liked
    (aiohttp's keep-alive timeout closes only connections between requests), so enough of them used up the
    process's file descriptors. A body that has already arrived (most of them: one packet with the headers)
    arms no timer."""
    if request.content.is_eof():
        yield
        return
    try:
        async with asyncio.timeout(request.config_dict[SETTINGS].body_timeout_seconds):
            yield
    except TimeoutError:
        raise web.HTTPRequestTimeout(headers=unreadable(request)) from None


async def read_body(request: web.Request, limit: int, too_large: Exception | None = None) -> bytes:
    """The body, or `too_large` (by default the keyed API's 413) once it is known to pass `limit`. A
    Content-Encoding aiohttp does not decode is a 415, a body that does not decode by its coding a 400
    (ApiErrors: callers with another error shape convert them)."""
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity", *CONTENT_CODINGS):
        raise ApiError(415, "unsupported_media_type",
                       f"Content-Encoding {coding!r} is not supported; send {', '.join(CONTENT_CODINGS)} or none",
                       headers={"Accept-Encoding": ", ".join(CONTENT_CODINGS)})
    try:
        return await read_limited(request, limit, (lambda: too_large) if too_large else (lambda: _too_large(limit)))
    except web.RequestPayloadError:
        # aiohttp's "Can not decode content-encoding: gzip", or a body cut short by the client.
        raise invalid(f"request body is not valid {coding} data (its Content-Encoding)" if coding in CONTENT_CODINGS
                      else "request body ended before its Content-Length or last chunk",
                      headers=unreadable(request)) from None


async def read_site_body(request: web.Request, limit: int) -> bytes:
    """read_body for the site API's routes, its errors in that API's shape ({"error": ...}); a body that does
    not decode by its Content-Encoding, or is cut short, is the "invalid request body" of the site API's layer."""
    try:
        return await read_body(request, limit, SiteError(413, "payload too large", limit=limit))
    except ApiError as exc:
        message = INVALID_SITE_BODY if exc.status == 400 else exc.message
        raise SiteError(exc.status, message, headers=exc.headers) from None


async def read_site_form(request: web.Request, limit: int) -> dict[str, object]:
    """The fields of a form body (URL-encoded or multipart), read no further than `limit` decoded bytes (see
    read_limited), else the site API's 413."""
    too_large = SiteError(413, "payload too large", limit=limit)
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    try:
        # A copy of the request with its own size cap: aiohttp's form parser then reads (and decodes) the body
        # in pieces of at most `limit` and stops past it, where the app's cap is 8 MB.
        async with body_deadline(request):
            return dict(await request.clone(client_max_size=limit).post())
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    except web.RequestPayloadError:
        raise SiteError(400, INVALID_SITE_BODY, headers=unreadable(request)) from None
    except (ValueError, LookupError):
        # aiohttp's form parsers raise these on the client's mistakes (a 500 before): a multipart type without a
        # usable boundary, bytes that are not of the body's charset, a charset Python does not know.
        raise SiteError(400, INVALID_SITE_BODY) from None


def decode_site_json(raw: bytes) -> object:
    """A dashboard body (sites, goals, shared links, sign-in) as JSON, through the one request decoder (UTF-8
    only, a leading byte order mark skipped), else the site API's 400 "invalid json"."""
    try:
        return decode_json(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise SiteError(400, "invalid json") from None


def _too_large(limit: int) -> ApiError:
    # Made only when needed: an exception built for every request costs more than the body's read.
    return ApiError(413, "payload_too_large", f"request body exceeds {limit} bytes")


def field_of(error: msgspec.ValidationError) -> tuple[str, str]:
    """Split msgspec's 'Expected `str`, got `int` - at `$.event`' into (field, message). A missing or unknown
    key is named itself: msgspec puts its path on the object holding it ('' for the body's top level)."""
    text = str(error)
    match = _PATH.search(text)
    prefix, message = ("", text) if not match else (_joined(match.group(0)), text[: match.start()])
    key = _MISSING.search(message) or _UNKNOWN.search(message)
    if key:
        return ".".join(p for p in (prefix, key.group(1)) if p), message
    return prefix, message


def _joined(suffixes: str) -> str:
    # A nested struct's own error carries its field's path, then msgspec appends the struct's: outermost last.
    parts = [p for p in reversed(_PATH_PART.findall(suffixes)) if p]
    return "".join(p if i == 0 or p.startswith("[") else f".{p}" for i, p in enumerate(parts))


def field_error(field: str, message: str) -> ValueError:
    """The error a struct's `__post_init__` raises about one of its fields: msgspec then reports it with the
    struct's own path appended, and field_of names the whole path, as for msgspec's own errors."""
    return ValueError(f"{message} - at `$.{field}`")


def not_blank(field: str, value: object) -> None:
    """A name or title that is only spaces lists as an empty row that cannot be told apart; names are
    otherwise kept as sent, spaces around included."""
    if isinstance(value, str) and not value.strip():
        raise field_error(field, "must not be blank")


def reject_unstorable(body: bytes, value: object) -> None:
    """The keyed API's 400 for what PostgreSQL cannot store (app/input_rules.py)."""
    found = problem(body, value)
    if found is None:
        return
    field, kind = found
    if kind == "nul":
        raise invalid(f"{field}: text may not contain the NUL character (\\u0000)",
                      fields=[{"field": field, "message": "contains U+0000"}])
    message = f"nests deeper than {MAX_DEPTH} levels"
    raise invalid(f"{field}: {message}", fields=[{"field": field, "message": message}])


def decode(body: bytes, schema: type[T]) -> T:
    try:
        value = decode_json(body, type=schema)
    except msgspec.ValidationError as exc:
        field, message = field_of(exc)
        raise invalid(
            f"{field}: {message}" if field else message, fields=[{"field": field, "message": message}]
        ) from None
    except (msgspec.DecodeError, RecursionError):
        raise invalid("request body is not valid JSON (or nests too deeply)") from None
    reject_unstorable(body, value)
    return value
