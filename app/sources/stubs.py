"""BigQuery, Snowflake, Salesforce and Segment: credentials are validated and the connection check
reaches the provider's API host (within the check timeout, so an unreachable host fails fast with a
clear reason). Importing from them is not implemented yet: a passing check is followed by a sync
that ends in `error` saying so, rather than pretending to be active.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

from app.sources.base import Connector, SourceError
from app.sources.netguard import DestinationRefused


class ProbeConnector(Connector):
    label = ""

    def host(self) -> str:
        raise NotImplementedError

    async def check(self) -> None:
        target = self.options.base_url or f"https://{self.host()}"
        parsed = urlparse(target)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        unreachable = SourceError(f"could not reach {self.label} at {parsed.hostname}:{port}")
        try:
            async with asyncio.timeout(self.timeout):
                # The network policy checks the resolved address; connect to that address only.
                address = (await self.guard.resolve(parsed.hostname or "", port))[0]
                _, writer = await asyncio.open_connection(address, port)
        except (TimeoutError, OSError):
            raise unreachable from None  # no socket error text: it would tell port states apart
        except SourceError as exc:
            if isinstance(exc, DestinationRefused):
                raise
            raise unreachable from None
        writer.close()

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        raise SourceError(f"importing from {self.label} is not supported yet; the connection check passed")


class BigQueryConnector(ProbeConnector):
    label = "BigQuery"

    def host(self) -> str:
        return "bigquery.googleapis.com"


class SnowflakeConnector(ProbeConnector):
    label = "Snowflake"

    def host(self) -> str:
        return f"{self.credentials.account}.snowflakecomputing.com"  # type: ignore[attr-defined]


class SalesforceConnector(ProbeConnector):
    label = "Salesforce"

    def host(self) -> str:
        return "login.salesforce.com"


class SegmentConnector(ProbeConnector):
    label = "Segment"

    def host(self) -> str:
        return "api.segmentapis.com"
