"""Data-source connectors, one module per family, behind app.sources.base.Connector. Segment sources
have none: their data arrives by push, through the Segment HTTP API (app/views/segment.py)."""

from __future__ import annotations

from app.sources.base import Connector
from app.sources.bigquery import BigQueryConnector
from app.sources.hubspot import HubSpotConnector
from app.sources.salesforce import SalesforceConnector
from app.sources.snowflake import SnowflakeConnector
from app.sources.sql import MysqlConnector, PostgresConnector, RedshiftConnector
from app.sources.stripe import StripeConnector

CONNECTORS: dict[str, type[Connector]] = {
    "postgres": PostgresConnector,
    "redshift": RedshiftConnector,
    "mysql": MysqlConnector,
    "stripe": StripeConnector,
    "hubspot": HubSpotConnector,
    "bigquery": BigQueryConnector,
    "snowflake": SnowflakeConnector,
    "salesforce": SalesforceConnector,
}
