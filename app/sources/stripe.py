"""Stripe through the official SDK (`stripe`): customers become user profiles (user id = Stripe customer
id), charges become events charge_succeeded / charge_failed / charge_pending, refunds become events
charge_refunded (a refund made after its charge was imported is picked up by its own `created`). Later
changes come from Stripe's events (app/sources/stripe_updates.py): a charge imported while pending gets a
charge_succeeded / charge_failed event when it settles, and a customer's changes reach its profile.

Incremental by `created`: the cursor keeps, per kind (Stripe's events too, under `updates`), the newest
created second and the ids seen in it, and the next sync asks for created >= that second and skips those
ids (Stripe timestamps are whole seconds, so `>` alone could miss objects created in the same second
after a sync). Stripe lists newest first; each page is committed as it comes, with a `partial` mark (the
newest object listed, the oldest second committed and the ids committed in it), so a sync cut short
resumes with created <= that second, skipping those ids, rather than listing everything again.

The SDK's aiohttp client runs on the event loop over the network policy's guarded connector, so every
connection (redirect hops included) is checked as the other HTTP connectors' are.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn

import aiohttp
import stripe

from app.sources.base import Batch, Connector, Imported, SourceError
from app.sources.netguard import DestinationRefused, GuardedConnector
from app.sources.schemas import StripeCredentials
from app.sources.stripe_updates import StripeUpdates, has_gap, pending_of

BASE_URL = "https://api.stripe.com"
PAGE = 100
SYNC_RETRIES = 2  # the SDK's own retries (connection errors, 409, 5xx, Stripe-Should-Retry); a check fails at once
DETAIL_CHARS = 300  # of Stripe's error message in status_reason


class GuardedStripeHTTP(stripe.AIOHTTPClient):
    """The SDK's aiohttp client on a guarded session; a connection the policy refused raises
    DestinationRefused instead of a (retried) APIConnectionError."""

    def __init__(self, connector: GuardedConnector, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connector = connector

    def _handle_request_error(self, e: Exception) -> NoReturn:
        if self.connector.refused:
            raise DestinationRefused from None
        super()._handle_request_error(e)


class StripeConnector(StripeUpdates, Connector):
    credentials: StripeCredentials

    @property
    def base_url(self) -> str:
        return (self.options.base_url or BASE_URL).rstrip("/")

    @asynccontextmanager
    async def client(self, *, retries: int) -> AsyncIterator[stripe.StripeClient]:
        # The SDK's own CA bundle, as its default clients use.
        connector = self.guard.aiohttp_connector(ssl=ssl.create_default_context(cafile=stripe.ca_bundle_path))
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            http = GuardedStripeHTTP(connector, session=session, timeout=timeout)
            yield stripe.StripeClient(self.credentials.api_key, base_addresses={"api": self.base_url},
                                      http_client=http, max_network_retries=retries)

    async def _call(self, fn: Callable[[], Awaitable[stripe.ListObject]], forbidden: str = "") -> stripe.ListObject:
        try:
            return await fn()
        except stripe.StripeError as exc:
            raise self._reason(exc, forbidden) from None

    async def _retrieve(self, retrieve: Callable[[str], Awaitable[stripe.StripeObject]], object_id: str) -> dict | None:
        """One object by id as a dict, None when Stripe has none by that id (404)."""
        try:
            return (await retrieve(object_id)).to_dict()
        except stripe.InvalidRequestError as exc:
            if exc.http_status == 404:
                return None
            raise self._reason(exc) from None
        except stripe.StripeError as exc:
            raise self._reason(exc) from None

    def _reason(self, exc: stripe.StripeError, forbidden: str = "") -> SourceError:
        """An SDK exception as a SourceError with a reason fit for status_reason (the runner scrubs secrets);
        `forbidden` follows Stripe's message when the key lacks a permission (what the call is for)."""
        if isinstance(exc, stripe.APIConnectionError):
            # One text for refused, reset and timed out: the reason would tell port states apart.
            return SourceError(f"could not reach Stripe at {self.base_url}")
        status = exc.http_status
        # Stripe's own message when the answer was a Stripe error object, not the body of whatever answered.
        message = exc.error.message if exc.error is not None and exc.error.message else None
        detail = f": {message[:DETAIL_CHARS]}" if message else ""
        if isinstance(exc, stripe.PermissionError):
            return SourceError(f"Stripe rejected the credentials (HTTP {status}){detail}{forbidden}")
        if isinstance(exc, stripe.AuthenticationError):
            return SourceError(f"Stripe rejected the credentials (HTTP {status}){detail}")
        if isinstance(exc, stripe.RateLimitError):
            return SourceError(f"Stripe rate-limited the sync (HTTP {status}); it will retry on schedule")
        if status is not None:
            return SourceError(f"Stripe answered HTTP {status}{detail}")
        return SourceError(f"Stripe call failed: {type(exc).__name__}{detail}")

    async def check(self) -> None:
        async with self.client(retries=0) as client:
            await self._call(lambda: client.v1.customers.list_async({"limit": 1}))

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        cursor = dict(cursor or {})
        total = 0
        await self._keep_pending(cursor)
        async with self.client(retries=SYNC_RETRIES) as client:
            v1 = client.v1
            if has_gap(cursor, time.time()):
                await self._bridge_gap(v1.charges.retrieve_async, cursor)
            for kind, lister, to_batch, params in (
                    ("customers", v1.customers.list_async, self._customers, {}),
                    ("charges", v1.charges.list_async, self._charges, {}),
                    # The charge, for its customer: a refund names only the charge.
                    ("refunds", v1.refunds.list_async, self._refunds, {"expand": ["data.charge"]})):
                async for items, mark in self._list_new(lister, params, cursor.get(kind)):
                    cursor[kind] = mark
                    if kind == "charges":  # their outcome comes from the events
                        cursor["pending"] = {**cursor["pending"], **pending_of(items)}
                    await self.sink.commit(Batch(**to_batch(items), cursor=dict(cursor)))
                    total += len(items)
            # After the listings: a charge they read as pending settles after that.
            total += await self._sync_updates(v1.events.list_async, cursor)
        return total, cursor

    async def _list_new(self, lister: Callable[[dict], Awaitable[stripe.ListObject]], params: dict,
                        mark: dict | None, *, forbidden: str = "") -> AsyncIterator[tuple[list[dict], dict | None]]:
        """The objects created since `mark`, a page at a time (newest first, as Stripe lists), each with the
        mark to store once it is committed: while the listing goes on, the mark keeps where it has got to
        (`partial`: the newest object listed, and the oldest second committed with the ids committed in it),
        so a sync cut short resumes below it instead of listing everything again; the last page's mark is
        the newest second listed with its ids. A kind with nothing new yields one empty page."""
        mark = dict(mark or {})
        partial = mark.pop("partial", None) or {}
        params = {**params, "limit": PAGE}
        created: dict[str, int] = {}
        seen: set[str] = set()
        if mark:
            created["gte"] = mark["t"]
            seen = set(mark["ids"])
        top, below = partial.get("top"), partial.get("below")
        if below:
            created["lte"] = below["t"]
            seen |= set(below["ids"])
        if created:
            params["created"] = created
        while True:
            page = await self._call(lambda: lister(params), forbidden)
            data = [o.to_dict() for o in page.data]
            items = [o for o in data if o.get("id") not in seen]
            for o in items:  # newest first: the top's second comes first, the oldest last
                if top is None or o["created"] > top["t"]:
                    top = {"t": o["created"], "ids": [o["id"]]}
                elif o["created"] == top["t"]:
                    top["ids"].append(o["id"])
                if below is None or o["created"] != below["t"]:
                    below = {"t": o["created"], "ids": [o["id"]]}
                else:
                    below["ids"].append(o["id"])
            if page.has_more and data:
                params["starting_after"] = data[-1]["id"]
                yield items, {**mark, "partial": {"top": top, "below": below}}
                continue
            if top is None:
                yield items, mark or None
            elif mark and mark["t"] == top["t"]:
                yield items, {"t": top["t"], "ids": top["ids"] + mark["ids"]}
            else:
                yield items, top
            return

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
            props = {
                "charge_id": ch["id"], "amount": ch.get("amount"), "currency": ch.get("currency"),
                "status": ch.get("status"), "paid": ch.get("paid"), "refunded": ch.get("refunded"),
                "amount_refunded": ch.get("amount_refunded"), "description": ch.get("description"),
            }
            name = f"charge_{ch.get('status') or 'created'}"
            events.append(Imported(name, object_id(ch.get("customer")), props,
                                   datetime.fromtimestamp(ch["created"], UTC)))
        return {"events": events}

    @staticmethod
    def _refunds(items: list[dict]) -> dict:
        events = []
        for r in items:
            charge = r.get("charge")
            customer = object_id(charge.get("customer")) if isinstance(charge, dict) else None
            props = {
                "refund_id": r["id"], "charge_id": object_id(charge), "amount": r.get("amount"),
                "currency": r.get("currency"), "status": r.get("status"), "reason": r.get("reason"),
            }
            events.append(Imported("charge_refunded", customer, props, datetime.fromtimestamp(r["created"], UTC)))
        return {"events": events}


def object_id(value: object) -> str | None:
    """The id of a reference Stripe sends as an id or, expanded, as the object."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else None
