"""A small JSON-over-HTTPS client for API connectors: timeouts, errors turned into clear reasons, and
every connection (redirect hops included) checked by the data-source network policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from app.sources.base import SourceError
from app.sources.netguard import DestinationRefused, GuardedConnector, NetGuard


@dataclass
class Answer:
    status: int
    headers: CIMultiDictProxy[str]
    body: Any


class Peer:
    def __init__(self, base_url: str, label: str, timeout: float, guard: NetGuard) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = label
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.guard = guard
        self.session: aiohttp.ClientSession | None = None
        self.connector: GuardedConnector | None = None

    async def __aenter__(self) -> Peer:
        self.connector = self.guard.aiohttp_connector()
        self.session = aiohttp.ClientSession(timeout=self.timeout, connector=self.connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()  # closes the connector it owns

    async def call(self, method: str, path: str, *, headers: dict[str, str], params: Any = None,
                   data: Any = None) -> Any:
        answer = await self.request(method, path, headers=headers, params=params, data=data)
        if answer.status in (401, 403):
            raise SourceError(f"{self.label} rejected the credentials (HTTP {answer.status})")
        if answer.status == 429:
            raise SourceError(f"{self.label} rate-limited the sync (HTTP 429); it will retry on schedule")
        if answer.status >= 400:
            raise SourceError(f"{self.label} answered HTTP {answer.status} to {method} {path}")
        return answer.body

    async def request(self, method: str, path: str, *, headers: dict[str, str], params: Any = None,
                      data: Any = None) -> Answer:
        """One request whatever its status (for connectors that read error bodies and rate-limit headers);
        the body is JSON when it parses, else None."""
        assert self.session is not None
        url = self.base_url + path
        try:
            async with self.session.request(method, url, headers=headers, params=params, data=data) as resp:
                try:
                    body = await resp.json(content_type=None)
                except ValueError:
                    body = None
                return Answer(resp.status, resp.headers, body)
        except (TimeoutError, aiohttp.ClientError, OSError):
            if self.connector is not None and self.connector.refused:
                raise DestinationRefused from None
            # One text for refused, reset and timed out: the reason would tell port states apart.
            raise SourceError(f"could not reach {self.label} at {self.base_url}") from None
