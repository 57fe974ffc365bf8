"""How many report runs one workspace may have in this process at once (running or waiting).

The report pool is shared by every workspace; without a bound, one tenant's slow custom SQL held every
connection and queued ahead of everyone else's runs. A workspace may use all but one of the pool's
connections (at least one), so another workspace's run always finds one free or waits behind a
bounded queue; a run past the bound answers 429 at once rather than queueing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.responses import ApiError


class ReportSlots:
    def __init__(self, pool_max: int) -> None:
        self.limit = max(1, pool_max - 1)
        self._running: dict[int, int] = {}

    @contextmanager
    def take(self, workspace_id: int) -> Iterator[None]:
        running = self._running.get(workspace_id, 0)
        if running >= self.limit:
            raise ApiError(429, "reports_busy", f"this workspace already runs {self.limit} report(s) at once; "
                           "retry when one has finished", headers={"Retry-After": "5"})
        self._running[workspace_id] = running + 1
        try:
            yield
        finally:
            left = self._running[workspace_id] - 1
            if left:
                self._running[workspace_id] = left
            else:
                del self._running[workspace_id]
