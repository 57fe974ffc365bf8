"""Segment (not in the spec's list of importing types): credentials are validated and the check, like
every sync, reaches the Segment API host within the timeout, so an unreachable host ends in `error`
with a clear reason. A Segment source pulls nothing: Segment's data arrives by push, through the
Segment HTTP API, so a sync that reaches the host imports no rows."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

from app.sources.base import Connector, SourceError
from app.sources.netguard import DestinationRefused


class SegmentConnector(Connector):
    async def check(self) -> None:
        """Open (and close) a TCP connection to the API host, or raise a SourceError saying why not."""
        parsed = urlparse(self.options.base_url or "https://api.segmentapis.com")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        unreachable = SourceError(f"could not reach Segment at {parsed.hostname}:{port}")
        try:
            async with asyncio.timeout(self.timeout):
                # The network policy checks the resolved address; connect to that address only.
                address = (await self.guard.resolve(parsed.hostname or "", port))[0]
                _, writer = await asyncio.open_connection(address, port)
        except (TimeoutError, OSError):
            raise unreachable from None  # no socket error text: it would tell port states apart
        except DestinationRefused:
            raise
        except SourceError:
            raise unreachable from None
        writer.close()

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        await self.check()
        return 0, cursor
