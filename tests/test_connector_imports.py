"""Connectors import their vendor SDK when a source of their type first runs, not when the server or a command
starts: BigQuery's client library pulls in pandas, and with Snowflake's connector they cost every `tally serve`
and `tally analytics status` about 1.5 s of start-up and 100 MB of memory, whether or not a source used them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app import sources

SDKS = ("google.cloud.bigquery", "pandas", "snowflake.connector", "simple_salesforce", "hubspot", "stripe")


def test_the_server_and_the_commands_import_no_connector_sdk():
    probe = ("import sys, app.server, app.cli; "
             f"print(sorted(m for m in {SDKS!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", sorted(sources.KINDS))
async def test_each_connector_is_found_by_its_type(kind):
    connector = await sources.connector_class(kind)
    assert issubclass(connector, sources.Connector) and connector.__module__.startswith("app.sources.")
