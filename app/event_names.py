"""Free-form names as Tally's snake_case event names: the one conversion for Segment's calls and for data
sources, so the same business event gets the same name whichever way it arrives."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

MAX_LENGTH = 128

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


@lru_cache(maxsize=4096)
def snake_case(text: str) -> str | None:
    """The way Segment's warehouses name event tables: "Order Completed" and "orderCompleted" ->
    order_completed, accents dropped ("Crème Brûlée" -> creme_brulee), a leading digit prefixed with
    e_. A name with no Latin letter or digit (e.g. "注文完了") becomes e_ and 8 hex digits of its BLAKE2b
    hash, a stable name so such events still count together. None for a blank name."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()  # "Crème" -> "Creme"
    snake = _NON_WORD.sub("_", _CAMEL.sub(r"\1_\2", ascii_text).lower()).strip("_")[:MAX_LENGTH]
    if not snake:
        if not text.strip():
            return None
        return "e_" + hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
    return snake if snake[0].isalpha() else f"e_{snake}"[:MAX_LENGTH]
