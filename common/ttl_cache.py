"""The one short-lived lookup cache (API keys, site rows): entries expire after a fixed time, misses
are cached too (None is a value), and the whole map is dropped when it reaches its bound, so memory
never grows with hostile lookups."""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_MISSING = object()


class TTLCache(Generic[V]):
    def __init__(self, seconds: float, max_entries: int = 50_000) -> None:
        self.seconds = seconds
        self.max_entries = max_entries
        self._entries: dict[Hashable, tuple[float, V]] = {}

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """(found, value): found is False when absent or expired."""
        hit = self._entries.get(key)
        if hit is None or hit[0] <= time.monotonic():
            return False, None
        return True, hit[1]

    def put(self, key: Hashable, value: V) -> V:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self.seconds, value)
        return value

    def forget(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
