"""What PostgreSQL cannot store, checked once for every input before it reaches storage/, with the same
rules on /v1, /api and Segment's calls (each API words the answer in its own shape):

- text (and JSON keys) may not hold U+0000: PostgreSQL text and jsonb cannot;
- a JSON value may nest at most MAX_DEPTH levels below its field (deeper is no real payload, and
  re-encoding it would run out of stack);
- any JSON number within double range is stored, integers beyond 64 bits included (storage/db.py
  encodes jsonb with msgspec, which round-trips them); msgspec's decoder refuses the rest;
- an id in a URL path that holds U+0000 or a lone surrogate names nothing: 404, before any SQL
  (`storable_path_ids`, checked by the layers of both sub-applications);
- JSON is UTF-8 (RFC 8259): a body that is not is malformed JSON like any other (`decode_json`);
  one leading byte order mark is skipped, as RFC 8259 lets a parser do (PowerShell and .NET write one).

Also the one parser of integer query parameters."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

MAX_DEPTH = 64
NUL_ESCAPE = b"\\u0000"

_INTEGER = re.compile(r"-?[0-9]+")
# A DNS name (labels of letters, digits, '-' and '_', which internal names use), at most 253 characters: a
# data source's database host, a host named in the settings.
HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                       r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?\Z")

Problem = tuple[str, Literal["nul", "depth"]]  # (the field's path, what is wrong)

BOM = b"\xef\xbb\xbf"


def decode_json(data: bytes | str, type: Any = Any, **options: Any) -> Any:
    """msgspec.json.decode for request input, where text that is not UTF-8 is malformed JSON like a
    syntax error, wherever it is: raised as the msgspec.DecodeError every caller answers with its API's
    400. msgspec itself raises UnicodeDecodeError for such bytes in a string it decodes (a 500) and
    skips them in fields it ignores or keeps raw; an ASCII body, the usual one, costs one quick scan.
    One leading byte order mark is skipped (RFC 8259 allows it); msgspec refuses it as a syntax error."""
    try:
        if isinstance(data, bytes) and not data.isascii():
            if data.startswith(BOM):
                data = data[len(BOM):]
            data.decode()
        elif isinstance(data, str) and data.startswith("\ufeff"):
            data = data[1:]
        return msgspec.json.decode(data, type=type, **options)
    except UnicodeError as exc:  # also UnicodeEncodeError: a str holding a lone surrogate
        raise msgspec.DecodeError(f"not UTF-8: {exc.reason}") from None


def storable_text(value: str) -> bool:
    """Whether PostgreSQL text can hold the string (no NUL, no lone surrogate)."""
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def storable_path_ids(values: Iterable[str]) -> bool:
    """Whether every id of a matched URL path can name a row (each API answers its 404 otherwise)."""
    return all(storable_text(value) for value in values)


def find_nul(value: object, path: str = "") -> str | None:
    """Path of the first string (or key) holding U+0000."""
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


def nests_deeper(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether containers nest more than `limit` levels (iterative: the input may be deep)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _fields(value: object) -> Mapping[str, object]:
    if isinstance(value, msgspec.Struct):
        return {f: getattr(value, f) for f in value.__struct_fields__}
    return value if isinstance(value, dict) else {}


def problem(body: bytes, value: object) -> Problem | None:
    """The first thing PostgreSQL could not store in a decoded JSON body, or None. Cheap byte scans of
    the body decide whether the walks run at all, so an ordinary event costs two scans."""
    if NUL_ESCAPE in body:
        found = find_nul(value)
        if found is not None:
            return found, "nul"
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH:
        for name, item in _fields(value).items():
            if nests_deeper(item):
                return name, "depth"
    return None


class NotAnInteger(ValueError):
    pass


class OutOfRange(ValueError):
    pass


def query_int(raw: str | None, default: int, lo: int, hi: int | None = None, *, clamp: bool = False) -> int:
    """An integer query parameter: `default` when absent or empty; below `lo` is out of range; above `hi`
    is out of range, or `hi` when clamping."""
    if raw is None or raw == "":
        return default
    # ASCII digits alone: int() also reads "1_000", " 5", "+5" and other scripts' digits (U+FF15).
    if not _INTEGER.fullmatch(raw):
        raise NotAnInteger(raw)
    try:
        value = int(raw)
    except ValueError:  # past int()'s digit limit
        raise NotAnInteger(raw) from None
    if value < lo:
        raise OutOfRange(raw)
    if hi is not None and value > hi:
        if not clamp:
            raise OutOfRange(raw)
        value = hi
    return value
