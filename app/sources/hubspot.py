"""HubSpot through its official client library (hubspot-api-client): contacts become user profiles (user
id = HubSpot contact id; traits from the contact's properties). Credentials are a private-app access
token, or an OAuth app's client id/secret with a refresh token exchanged for an access token on each run.

Incremental by updatedAt: every contact is listed, and those updated since the cursor are merged. The
cursor is the newest updatedAt seen, but never later than SETTLE before the sync started, with the ids
(and a digest of the properties) of the contacts seen from it on; a sync reads from it on (>=) and skips
only contacts whose digest it holds unchanged. So a contact updated in the cursor's millisecond after a
sync is not skipped for good, nor one updated while the listing ran after the listing had passed it
(listed in id order, it would be older than a contact listed later). A cursor stored as an ISO string
(before digests were kept) is read with `>` once.

The library blocks (urllib3), so each call runs in a worker thread; its connections go through the
network policy (guard.guard_pool_manager on the pool manager of each API client it builds).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib import metadata
from types import ModuleType
from typing import Any, TypeVar

import urllib3
from hubspot import HubSpot
from hubspot.crm.contacts.exceptions import ApiException as ContactsError
from hubspot.oauth.exceptions import ApiException as OAuthError
from urllib3.util.retry import Retry

from app.sources.base import Batch, Connector, SourceError, utc
from app.sources.schemas import OAuthCredentials
from app.sources.sql import row_digest

BASE_URL = "https://api.hubapi.com"
PROPERTIES = ["email", "firstname", "lastname", "company", "phone", "lifecyclestage", "createdate"]
PAGE = 100
TOKEN_CALL = "POST /oauth/v1/token"
CONTACTS_CALL = "GET /crm/v3/objects/contacts"
# One attempt per call (a scheduled sync is the retry), redirects followed: each hop is guarded too.
ONE_ATTEMPT = Retry(total=10, connect=0, read=0, status=0, other=0, redirect=10)
USER_AGENT = f"hubspot-api-client-python; {metadata.version('hubspot-api-client')}"
# How far before a sync's start its cursor may reach: contacts updated later may have been listed before
# their update; the margin also covers a clock between HubSpot's and this machine's.
SETTLE = timedelta(minutes=5)

T = TypeVar("T")


def read_cursor(cursor: Any) -> tuple[datetime | None, dict[str, str] | None]:
    """(the updatedAt to read from, {contact id: properties digest} of the contacts seen from it on); None
    for the digests of a cursor stored as an ISO string, read with `>` as it was written."""
    if isinstance(cursor, dict):
        seen = cursor.get("seen")
        return utc(cursor.get("t")), {str(k): str(v) for k, v in seen.items()} if isinstance(seen, dict) else {}
    return (utc(cursor) if cursor else None), None


class HubSpotConnector(Connector):
    credentials: OAuthCredentials

    @property
    def base_url(self) -> str:
        return (self.options.base_url or BASE_URL).rstrip("/")

    # --- the library, guarded --------------------------------------------------------------------------
    def _client(self, access_token: str | None = None) -> HubSpot:
        return HubSpot(access_token=access_token, host=self.base_url, retry=ONE_ATTEMPT, api_factory=self._api)

    def _api(self, package: ModuleType, api_name: str, config: dict[str, Any]) -> Any:
        """The library's hook for building each API client (as its default factory does), here with its
        urllib3 pool manager guarded by the network policy."""
        configuration = package.Configuration(host=config["host"])
        configuration.access_token = config.get("access_token")
        configuration.retries = config["retry"]
        client = package.ApiClient(configuration=configuration)
        client.user_agent = USER_AGENT
        self.guard.guard_pool_manager(client.rest_client.pool_manager)
        return getattr(package, api_name)(api_client=client)

    async def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        try:
            return await asyncio.to_thread(fn, _request_timeout=self.timeout, **kwargs)
        except (ContactsError, OAuthError) as exc:
            status = exc.status or 0
            if status == 0:  # the library's wrapping of a TLS failure
                raise SourceError(f"could not reach HubSpot at {self.base_url}") from None
            if status in (401, 403):
                raise SourceError(f"HubSpot rejected the credentials (HTTP {status})") from None
            if status == 429:
                raise SourceError("HubSpot rate-limited the sync (HTTP 429); it will retry on schedule") from None
            raise SourceError(f"HubSpot answered HTTP {status} to {what}") from None
        except urllib3.exceptions.HTTPError:
            # One text for refused, reset and timed out: the reason would tell port states apart.
            raise SourceError(f"could not reach HubSpot at {self.base_url}") from None

    async def token(self) -> str:
        c = self.credentials
        if c.access_token:
            return c.access_token
        tokens = self._client().oauth.tokens_api
        try:
            answer = await self._call(TOKEN_CALL, tokens.create, grant_type="refresh_token", client_id=c.client_id,
                                      client_secret=c.client_secret, refresh_token=c.refresh_token)
        except ValueError:  # an answer without the fields the library requires
            answer = None
        finally:
            tokens.api_client.rest_client.pool_manager.clear()
        if answer is None or not answer.access_token:
            raise SourceError("HubSpot did not return an access token for the refresh token")
        return answer.access_token

    async def _contacts_page(self, contacts: Any, after: str | None, limit: int = PAGE) -> Any:
        try:
            return await self._call(CONTACTS_CALL, contacts.get_page, limit=limit, properties=PROPERTIES,
                                    after=after)
        except ValueError:  # an answer without the fields the library requires
            raise SourceError(f"HubSpot's answer to {CONTACTS_CALL} could not be read") from None

    @contextmanager
    def _contacts(self, access_token: str) -> Iterator[Any]:
        """The contacts API for one run; its connections are closed at the end of it."""
        contacts = self._client(access_token).crm.contacts.basic_api
        try:
            yield contacts
        finally:
            contacts.api_client.rest_client.pool_manager.clear()

    # --- the connector ---------------------------------------------------------------------------------
    async def check(self) -> None:
        with self._contacts(await self.token()) as contacts:
            await self._contacts_page(contacts, None, limit=1)

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        since, seen = read_cursor(cursor)
        settled = datetime.now(UTC) - SETTLE
        newest, at_newest = since, {}
        recent: dict[str, tuple[datetime, str]] = {}  # contacts updated at or after `settled`: their digests
        traits: dict[str, tuple[dict, datetime]] = {}
        after = None
        with self._contacts(await self.token()) as contacts:
            while True:
                page = await self._contacts_page(contacts, after)
                for contact in page.results:
                    contact_id = str(contact.id)
                    updated = utc(contact.updated_at) or datetime.now(UTC)
                    if since is not None and updated < since:
                        continue
                    digest = row_digest(contact.properties or {})
                    fresh = updated > since if seen is None and since is not None else \
                        seen is None or seen.get(contact_id) != digest
                    if fresh:
                        traits[contact_id] = self._traits(contact)
                    if newest is None or updated > newest:
                        newest, at_newest = updated, {}
                    if updated == newest:
                        at_newest[contact_id] = digest
                    if updated >= settled:
                        recent[contact_id] = (updated, digest)
                after = page.paging.next.after if page.paging and page.paging.next else None
                if not after:
                    break
        mark = None
        if newest is not None:
            # Not past `settled` (a contact listed before its update there may be older than `newest`), nor
            # back before `since` (a clock set back).
            start = min(newest, settled) if since is None else max(since, min(newest, settled))
            keep = at_newest if start == newest else {c: d for c, (t, d) in recent.items() if t >= start}
            mark = {"t": start.isoformat(), "seen": keep}
        await self.sink.commit(Batch(traits=traits, cursor=mark))
        return len(traits), mark

    @staticmethod
    def _traits(contact: Any) -> tuple[dict, datetime]:
        props = {k: v for k, v in (contact.properties or {}).items() if v not in (None, "")}
        created = utc(contact.created_at) or datetime.now(UTC)
        name = " ".join(p for p in (props.get("firstname"), props.get("lastname")) if p)
        values = {
            **{k: v for k, v in props.items() if k not in ("hs_object_id", "createdate", "lastmodifieddate")},
            "hubspot_contact_id": str(contact.id),
            "created_at": created.isoformat().replace("+00:00", "Z"),
        }
        if name:
            values["name"] = name
        return values, created
