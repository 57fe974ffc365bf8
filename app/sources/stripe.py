"""Stripe: customers become user profiles (user id = Stripe customer id), charges become events
charge_succeeded / charge_failed / charge_pending.

Incremental by `created`: the cursor keeps, per object, the newest created second and the ids seen in
it, and the next sync asks for created >= that second and skips those ids (Stripe timestamps are
whole seconds, so `>` alone could miss objects created in the same second after a sync).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.sources.base import Batch, Connector, Imported
from app.sources.http import Peer
from app.sources.schemas import StripeCredentials

BASE_URL = "https://api.stripe.com"
PAGE = 100


class StripeConnector(Connector):
    credentials: StripeCredentials

    def peer(self) -> Peer:
        return Peer(self.options.base_url or BASE_URL, "Stripe", self.timeout, self.guard)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credentials.api_key}"}

    async def check(self) -> None:
        async with self.peer() as peer:
            await peer.call("GET", "/v1/customers", headers=self.headers, params={"limit": "1"})

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        cursor = dict(cursor or {})
        total = 0
        async with self.peer() as peer:
            for kind, to_batch in (("customers", self._customers), ("charges", self._charges)):
                items, mark = await self._list_new(peer, kind, cursor.get(kind))
                cursor[kind] = mark
                await self.sink.commit(Batch(**to_batch(items), cursor=dict(cursor)))
                total += len(items)
        return total, cursor

    async def _list_new(self, peer: Peer, kind: str, mark: dict | None) -> tuple[list[dict], dict | None]:
        params: dict[str, str] = {"limit": str(PAGE)}
        seen: set[str] = set()
        if mark:
            params["created[gte]"] = str(mark["t"])
            seen = set(mark["ids"])
        items: list[dict] = []
        while True:
            page = await peer.call("GET", f"/v1/{kind}", headers=self.headers, params=params)
            items.extend(o for o in page.get("data", []) if o.get("id") not in seen)
            if not page.get("has_more") or not page.get("data"):
                break
            params["starting_after"] = page["data"][-1]["id"]
        if not items:
            return [], mark
        newest = max(o["created"] for o in items)
        ids = [o["id"] for o in items if o["created"] == newest]
        if mark and mark["t"] == newest:
            ids += mark["ids"]
        return items, {"t": newest, "ids": ids}

    @staticmethod
    def _customers(items: list[dict]) -> dict:
        traits = {}
        for c in items:
            created = datetime.fromtimestamp(c["created"], UTC)
            values = {
                "email": c.get("email"), "name": c.get("name"), "phone": c.get("phone"),
                "description": c.get("description"), "stripe_customer_id": c["id"],
                "created_at": created.isoformat().replace("+00:00", "Z"),
            }
            traits[c["id"]] = ({k: v for k, v in values.items() if v is not None}, created)
        return {"traits": traits}

    @staticmethod
    def _charges(items: list[dict]) -> dict:
        events = []
        for ch in items:
            customer = ch.get("customer")
            if isinstance(customer, dict):
                customer = customer.get("id")
            props = {
                "charge_id": ch["id"], "amount": ch.get("amount"), "currency": ch.get("currency"),
                "status": ch.get("status"), "paid": ch.get("paid"), "refunded": ch.get("refunded"),
                "amount_refunded": ch.get("amount_refunded"), "description": ch.get("description"),
            }
            name = f"charge_{ch.get('status') or 'created'}"
            events.append(Imported(name, customer, props, datetime.fromtimestamp(ch["created"], UTC)))
        return {"events": events}
