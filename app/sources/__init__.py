"""Data-source connectors, one module per family, behind app.sources.base.Connector. Segment sources
have none: their data arrives by push, through the Segment HTTP API (app/views/segment.py)."""

from __future__ import annotations

import asyncio
import importlib

from app.sources.base import Connector

# Each connector's module imports its vendor SDK (BigQuery's client library pulls in pandas; with Snowflake's
# connector they took ~1.5 s of every server's and command's start-up), so a module is imported when a source
# of its type first runs, in a worker thread rather than on the event loop (connector_class).
_MODULES: dict[str, tuple[str, str]] = {
    "postgres": ("app.sources.sql", "PostgresConnector"),
    "redshift": ("app.sources.sql", "RedshiftConnector"),
    "mysql": ("app.sources.sql", "MysqlConnector"),
    "stripe": ("app.sources.stripe", "StripeConnector"),
    "hubspot": ("app.sources.hubspot", "HubSpotConnector"),
    "bigquery": ("app.sources.bigquery", "BigQueryConnector"),
    "snowflake": ("app.sources.snowflake", "SnowflakeConnector"),
    "salesforce": ("app.sources.salesforce", "SalesforceConnector"),
}
KINDS = frozenset(_MODULES)


async def connector_class(kind: str) -> type[Connector]:
    """The connector of a source type (one of KINDS), its module imported first if need be."""
    module, name = _MODULES[kind]
    return getattr(await asyncio.to_thread(importlib.import_module, module), name)
