"""BigQuery through google-cloud-bigquery, authenticated with the service account key from the
credentials; rows of options.table (in the credentials' dataset) or options.query become events by the
shared SQL options model and cursor rules (app.sources.sql).

The client library blocks, so every call runs in a worker thread. One query per sync: its result is
read page by page (jobs.query, then jobs.getQueryResults with page tokens), since BigQuery bills each
query by the bytes it scans and a query per page would bill the table again for every page.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar
from urllib.parse import urlsplit

import google.auth.exceptions
import google.auth.transport.requests
import requests
from google.api_core import exceptions as api_exceptions
from google.api_core.client_options import ClientOptions
from google.cloud import bigquery
from google.oauth2 import service_account

from app.sources.base import SourceError
from app.sources.netguard import GuardedHTTPAdapter
from app.sources.schemas import BigQueryCredentials
from app.sources.sql import PAGE, SqlConnector

SCOPES = ["https://www.googleapis.com/auth/bigquery.readonly"]
API_URL = "https://bigquery.googleapis.com"
TOKEN_URI = "https://oauth2.googleapis.com/token"
QUERY_WAIT_SECONDS = 600.0
DETAIL_CHARS = 300  # of a peer's error text in status_reason: enough to act on, not a page of its body

T = TypeVar("T")


def query_parameter(value: Any) -> bigquery.ScalarQueryParameter:
    """A cursor value as a positional parameter of BigQuery's matching type."""
    if isinstance(value, bool):
        kind = "BOOL"
    elif isinstance(value, int):
        kind = "INT64"
    elif isinstance(value, float):
        kind = "FLOAT64"
    elif isinstance(value, Decimal):
        kind = "BIGNUMERIC"
    elif isinstance(value, datetime):
        kind = "DATETIME" if value.tzinfo is None else "TIMESTAMP"
    elif isinstance(value, date):
        kind = "DATE"
    else:
        kind = "STRING"
    return bigquery.ScalarQueryParameter(None, kind, value)


class BigQueryConnector(SqlConnector):
    quote = "`"
    credentials: BigQueryCredentials

    def placeholder(self, index: int) -> str:
        return "?"

    @property
    def api_url(self) -> str:
        return self.options.base_url or API_URL

    # --- blocking side (worker thread) ---------------------------------------------------------------
    def _client(self) -> bigquery.Client:
        c = self.credentials
        info = {"token_uri": TOKEN_URI, **c.service_account_key}
        credentials = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
        # Both sessions (the key's token_uri and the API) connect only where the network policy allows.
        http = google.auth.transport.requests.AuthorizedSession(
            credentials, refresh_timeout=self.timeout,
            auth_request=google.auth.transport.requests.Request(session=self.guard.requests_session()))
        http.trust_env = False  # an environment proxy would be the peer the policy checks, not the host
        adapter = GuardedHTTPAdapter(self.guard)
        http.mount("https://", adapter)
        http.mount("http://", adapter)
        return bigquery.Client(project=c.project_id, credentials=credentials, _http=http,
                               client_options=ClientOptions(api_endpoint=self.api_url))

    def _query(self, client: bigquery.Client, sql: str, args: list, *, dry_run: bool) -> bigquery.table.RowIterator:
        c = self.credentials
        config = bigquery.QueryJobConfig(
            default_dataset=f"{c.project_id}.{c.dataset}", use_legacy_sql=False, dry_run=dry_run,
            query_parameters=[query_parameter(v) for v in args],
        )
        # A check fails at once; a sync rides out brief outages within the run's own timeout.
        retry = None if dry_run else bigquery.DEFAULT_RETRY.with_timeout(self.timeout)
        return client.query_and_wait(sql, job_config=config, api_timeout=self.timeout, retry=retry, job_retry=None,
                                     wait_timeout=QUERY_WAIT_SECONDS, page_size=PAGE)

    # --- async side --------------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception as exc:
            raise self._reason(exc) from None

    def _reason(self, exc: BaseException) -> BaseException:
        """A vendor exception as a SourceError with a reason fit for status_reason."""
        if isinstance(exc, api_exceptions.RetryError) and exc.cause is not None:
            return self._reason(exc.cause)
        if isinstance(exc, google.auth.exceptions.RefreshError):
            detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else type(exc).__name__
            return SourceError(f"Google rejected the service account key: {detail[:DETAIL_CHARS]}")
        if isinstance(exc, google.auth.exceptions.TransportError):
            token_uri = self.credentials.service_account_key.get("token_uri") or TOKEN_URI
            return SourceError(f"could not reach Google's token endpoint at {urlsplit(str(token_uri)).netloc}")
        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            # One text for refused, reset and timed out: the reason would tell port states apart.
            return SourceError(f"could not reach BigQuery at {urlsplit(self.api_url).netloc}")
        if isinstance(exc, api_exceptions.GoogleAPICallError):
            # The API's own message, without the request line the client puts before it.
            first = exc.errors[0] if exc.errors and isinstance(exc.errors[0], dict) else {}
            detail = str(first.get("message") or exc.message)[:DETAIL_CHARS]
            if isinstance(exc, api_exceptions.Unauthorized | api_exceptions.Forbidden):
                return SourceError(f"BigQuery refused access (HTTP {exc.code}): {detail}")
            return SourceError(f"BigQuery answered HTTP {exc.code}: {detail}")
        return exc

    async def open(self) -> bigquery.Client:
        try:
            return await self._call(self._client)
        except ValueError:  # a key file whose private key does not parse
            raise SourceError("the service account key cannot be used: its private_key does not parse") from None

    async def close(self, conn: bigquery.Client) -> None:
        await asyncio.to_thread(conn.close)

    async def check(self) -> None:
        """A dry run: BigQuery validates the table, query and columns without running (or billing) it."""
        relation = self.relation()
        columns = list(dict.fromkeys(c for c in (
            self.options.cursor_column, self.options.timestamp_column, self.options.event_column,
            self.options.user_id_column, *(self.options.properties or {}).values()) if c))
        select = ", ".join(self.ident(c) for c in columns) or "*"
        sql = f"SELECT {select} FROM {relation}" if relation else "SELECT 1"
        async with asyncio.timeout(self.timeout):
            client = await self.open()
            try:
                await self._call(lambda: self._query(client, sql, [], dry_run=True))
            finally:
                await self.close(client)

    async def stream(self, conn: bigquery.Client, sql: str, args: list) -> AsyncIterator[list[dict]]:
        rows = await self._call(lambda: self._query(conn, sql, args, dry_run=False))
        pages = rows.pages

        def next_page() -> list[dict] | None:
            page = next(pages, None)
            return None if page is None else [dict(row.items()) for row in page]

        while (page := await self._call(next_page)) is not None:
            yield page
