"""A small JSON-over-HTTPS client for API connectors: timeouts, and errors turned into clear reasons."""

from __future__ import annotations

from typing import Any

import aiohttp

from app.sources.base import SourceError


class Peer:
    def __init__(self, base_url: str, label: str, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = label
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Peer:
        self.session = aiohttp.ClientSession(timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.session is not None
        await self.session.close()

    async def call(self, method: str, path: str, *, headers: dict[str, str], params: Any = None,
                   data: Any = None) -> Any:
        assert self.session is not None
        url = self.base_url + path
        try:
            async with self.session.request(method, url, headers=headers, params=params, data=data) as resp:
                if resp.status in (401, 403):
                    raise SourceError(f"{self.label} rejected the credentials (HTTP {resp.status})")
                if resp.status == 429:
                    raise SourceError(f"{self.label} rate-limited the sync (HTTP 429); it will retry on schedule")
                if resp.status >= 400:
                    raise SourceError(f"{self.label} answered HTTP {resp.status} to {method} {path}")
                return await resp.json(content_type=None)
        except TimeoutError:
            raise SourceError(f"{self.label} at {self.base_url} did not answer in time") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise SourceError(f"could not reach {self.label} at {self.base_url}: {type(exc).__name__}") from None
