"""Helpers for connectors built on blocking vendor SDKs: run their calls in a worker thread, and give
requests-based SDKs a session whose every connection passes one host check first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking SDK call off the event loop."""
    return await asyncio.to_thread(fn, *args)


class GuardedAdapter(HTTPAdapter):
    """Calls check(host, port) before sending each request, so no connection bypasses it (redirects and
    retries go through send() too)."""

    def __init__(self, check: Callable[[str, int], None]) -> None:
        super().__init__(max_retries=0)
        self.check = check

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        parts = urlsplit(request.url or "")
        self.check(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        return super().send(request, *args, **kwargs)


def guard_session(session: requests.Session, check: Callable[[str, int], None]) -> requests.Session:
    """Route every http(s) request of `session` through check(host, port)."""
    adapter = GuardedAdapter(check)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
