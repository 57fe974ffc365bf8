"""CSV fields for files a person opens in a spreadsheet: the event export and emailed report results."""

from __future__ import annotations

import re

import msgspec

# A spreadsheet reads a cell starting with one of these as a formula (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NEEDS_QUOTES = re.compile(r'[",\r\n]')


def csv_cell(value: object) -> str:
    """One CSV field. Text a spreadsheet would run as a formula gets a leading single quote and is
    always quoted (OWASP); NULL is empty; numbers are written as they are; booleans, objects and arrays as
    their JSON text (msgspec's, which writes integers beyond 64 bits as stored; orjson refuses them);
    other text is quoted only when needed."""
    if value is None:
        return ""
    if isinstance(value, dict | list | bool):
        value = msgspec.json.encode(value).decode()
    text = str(value)
    if isinstance(value, str) and text.startswith(FORMULA_STARTS):
        return '"\'' + text.replace('"', '""') + '"'
    if _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_line(cells: list) -> str:
    return ",".join(csv_cell(c) for c in cells) + "\r\n"
