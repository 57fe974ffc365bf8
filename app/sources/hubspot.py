"""HubSpot: contacts become user profiles (user id = HubSpot contact id; traits from the contact's
properties). Credentials are a private-app access token, or an OAuth app's client id/secret with a
refresh token exchanged for an access token on each run.

Incremental by updatedAt: every contact is listed, and only those updated after the cursor are
merged (trait merging is idempotent, so a contact counted twice changes nothing).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.sources.base import Batch, Connector, SourceError, utc
from app.sources.http import Peer
from app.sources.schemas import OAuthCredentials

BASE_URL = "https://api.hubapi.com"
PROPERTIES = "email,firstname,lastname,company,phone,lifecyclestage,createdate"
PAGE = 100


class HubSpotConnector(Connector):
    credentials: OAuthCredentials

    def peer(self) -> Peer:
        return Peer(self.options.base_url or BASE_URL, "HubSpot", self.timeout, self.guard)

    async def token(self, peer: Peer) -> str:
        c = self.credentials
        if c.access_token:
            return c.access_token
        form = {"grant_type": "refresh_token", "client_id": c.client_id, "client_secret": c.client_secret,
                "refresh_token": c.refresh_token}
        answer = await peer.call("POST", "/oauth/v1/token", headers={}, data=form)
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not token:
            raise SourceError("HubSpot did not return an access token for the refresh token")
        return token

    async def check(self) -> None:
        async with self.peer() as peer:
            headers = {"Authorization": f"Bearer {await self.token(peer)}"}
            await peer.call("GET", "/crm/v3/objects/contacts", headers=headers, params={"limit": "1"})

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        since = utc(cursor) if cursor else None
        newest = since
        traits: dict[str, tuple[dict, datetime]] = {}
        async with self.peer() as peer:
            headers = {"Authorization": f"Bearer {await self.token(peer)}"}
            params = {"limit": str(PAGE), "properties": PROPERTIES, "archived": "false"}
            while True:
                page = await peer.call("GET", "/crm/v3/objects/contacts", headers=headers, params=params)
                for contact in page.get("results", []):
                    updated = utc(contact.get("updatedAt")) or datetime.now(UTC)
                    if since is not None and updated <= since:
                        continue
                    newest = max(newest, updated) if newest else updated
                    traits[str(contact["id"])] = self._traits(contact)
                after = ((page.get("paging") or {}).get("next") or {}).get("after")
                if not after:
                    break
                params["after"] = after
        mark = newest.isoformat() if newest else None
        await self.sink.commit(Batch(traits=traits, cursor=mark))
        return len(traits), mark

    @staticmethod
    def _traits(contact: dict) -> tuple[dict, datetime]:
        props = {k: v for k, v in (contact.get("properties") or {}).items() if v not in (None, "")}
        created = utc(contact.get("createdAt")) or datetime.now(UTC)
        name = " ".join(p for p in (props.get("firstname"), props.get("lastname")) if p)
        values = {
            **{k: v for k, v in props.items() if k not in ("hs_object_id", "createdate", "lastmodifieddate")},
            "hubspot_contact_id": str(contact["id"]),
            "created_at": created.isoformat().replace("+00:00", "Z"),
        }
        if name:
            values["name"] = name
        return values, created
