"""Local stand-ins for Stripe's and HubSpot's HTTP APIs (aiohttp servers on loopback), with the
paging, filtering and auth behaviour the connectors rely on. FakeStripe answers as Stripe's API does
for the official SDK: list objects (`object: "list"`, `data`, `has_more`, `url`), newest first, paged
by `starting_after`, filtered by `created[gt|gte|lte]`, with `expand[]=data.charge` on refunds, and
`/v1/events` filtered by `types[]` as well (an event holds its object as it was: `data.object`; events
older than Stripe's 30 days are gone). A charge is retrieved by id (`/v1/charges/{id}`) as it is now."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.test_utils import TestServer

STRIPE_KEY = "sk_test_StripeSecret4242abcd"
EVENTS_KEPT_SECONDS = 30 * 86_400  # Stripe lists the events of the last 30 days only


@dataclass
class FakeStripe:
    api_key: str
    customers: list[dict] = field(default_factory=list)
    charges: list[dict] = field(default_factory=list)
    refunds: list[dict] = field(default_factory=list)  # `charge` holds the charge's id, as Stripe stores it
    # A restricted key without refunds read access: /v1/refunds answers Stripe's 403.
    refunds_forbidden: bool = False
    requests: int = 0
    # When set, /v1/charges answers only once the test sets it (to act while a sync is mid-way).
    charges_gate: asyncio.Event | None = None
    charges_asked: asyncio.Event = field(default_factory=asyncio.Event)
    # When set, the charges request with this number (1 for the first) answers Stripe's 400 error, once.
    fail_charges_request: int | None = None
    charges_requests: int = 0
    events: list[dict] = field(default_factory=list)  # newest-first order is the fake's, as for the others
    # A restricted key without events read access: /v1/events answers Stripe's 403.
    events_forbidden: bool = False
    # When set, the events request with this number (1 for the first) answers Stripe's 400 error, once.
    fail_events_request: int | None = None
    events_requests: int = 0
    charges_retrieved: list[str] = field(default_factory=list)  # the ids of GET /v1/charges/{id}, in order

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/customers", self._lister(lambda: self.customers))
        app.router.add_get("/v1/charges", self._gated(self._lister(lambda: self.charges)))
        app.router.add_get("/v1/charges/{id}", self._retrieve_charge)
        app.router.add_get("/v1/refunds", self._forbiddable(self._lister(lambda: self.refunds)))
        app.router.add_get("/v1/events", self._events(self._lister(
            lambda: [e for e in self.events if e["created"] >= time.time() - EVENTS_KEPT_SECONDS])))
        return app

    async def _retrieve_charge(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": {"type": "invalid_request_error", "message": "Invalid API Key"}},
                                     status=401)
        charge_id = request.match_info["id"]
        self.charges_retrieved.append(charge_id)
        found = next((c for c in self.charges if c["id"] == charge_id), None)
        if found is None:
            return web.json_response({"error": {"type": "invalid_request_error", "code": "resource_missing",
                                                "message": f"No such charge: '{charge_id}'"}}, status=404)
        return web.json_response(found)

    def event(self, type_: str, obj: dict, created: int) -> dict:
        """Record an event as Stripe does when `obj` changes: a copy of the object as it is now."""
        evt = {"id": f"evt_{len(self.events) + 1:06d}", "object": "event", "type": type_, "created": created,
               "api_version": "2025-01-27.acacia", "livemode": False, "pending_webhooks": 0,
               "data": {"object": dict(obj)}}
        self.events.append(evt)
        return evt

    def _events(self, handler):
        async def handle(request: web.Request) -> web.Response:
            self.events_requests += 1
            if self.events_forbidden:
                return web.json_response({"error": {"type": "invalid_request_error", "message": (
                    "The provided key 'rk_test_****abcd' does not have the required permissions for this endpoint. "
                    "Having the 'rak_event_read' permission would allow this request to continue.")}}, status=403)
            if self.events_requests == self.fail_events_request:
                return web.json_response({"error": {"type": "invalid_request_error",
                                                    "message": "Simulated failure."}}, status=400)
            return await handler(request)

        return handle

    def _gated(self, handler):
        async def handle(request: web.Request) -> web.Response:
            self.charges_asked.set()
            if self.charges_gate is not None:
                await self.charges_gate.wait()
            self.charges_requests += 1
            if self.charges_requests == self.fail_charges_request:
                return web.json_response({"error": {"type": "invalid_request_error",
                                                    "message": "Simulated failure."}}, status=400)
            return await handler(request)

        return handle

    def _forbiddable(self, handler):
        async def handle(request: web.Request) -> web.Response:
            if self.refunds_forbidden:
                return web.json_response({"error": {"type": "invalid_request_error", "message": (
                    "The provided key 'rk_test_****abcd' does not have the required permissions for this endpoint. "
                    "Having the 'rak_refund_read' permission would allow this request to continue.")}}, status=403)
            return await handler(request)

        return handle

    def _lister(self, objects):
        async def handle(request: web.Request) -> web.Response:
            self.requests += 1
            if request.headers.get("Authorization") != f"Bearer {self.api_key}":
                # Stripe masks the key in its message; so does the fake.
                sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
                return web.json_response({"error": {"type": "invalid_request_error",
                                                    "message": f"Invalid API Key provided: {sent[:8]}****{sent[-4:]}"}},
                                         status=401)
            q = request.query
            limit = int(q.get("limit", "10"))
            items = sorted(objects(), key=lambda o: (o["created"], o["id"]), reverse=True)  # newest first
            # The SDK encodes lists with indices: types[0]=charge.succeeded.
            types = [v for k, v in q.items() if k == "types[]" or k.startswith("types[")]
            if types:
                items = [o for o in items if o["type"] in types]
            if "created[gt]" in q:
                items = [o for o in items if o["created"] > int(q["created[gt]"])]
            if "created[gte]" in q:
                items = [o for o in items if o["created"] >= int(q["created[gte]"])]
            if "created[lte]" in q:
                items = [o for o in items if o["created"] <= int(q["created[lte]"])]
            if "starting_after" in q:
                ids = [o["id"] for o in items]
                items = items[ids.index(q["starting_after"]) + 1:]
            page = items[:limit]
            # The SDK encodes lists with indices: expand[0]=data.charge.
            if "data.charge" in [v for k, v in q.items() if k == "expand[]" or k.startswith("expand[")]:
                charges = {c["id"]: c for c in self.charges}
                page = [{**o, "charge": charges.get(o["charge"], o["charge"])} for o in page]
            return web.json_response({"object": "list", "data": page, "has_more": len(items) > limit,
                                      "url": request.path})

        return handle


@dataclass
class FakeHubSpot:
    access_token: str
    client_id: str = "hub-client"
    client_secret: str = "hub-client-secret"
    refresh_token: str = "hub-refresh-token"
    contacts: list[dict] = field(default_factory=list)
    token_answer: dict | None = None  # answered to a good refresh token instead of HubSpot's own
    after_page: Callable[[int], None] | None = None  # called with a served page's offset: changes mid-listing

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/oauth/v1/token", self._token)
        app.router.add_get("/crm/v3/objects/contacts", self._contacts)
        return app

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if (form.get("grant_type"), form.get("client_id"), form.get("client_secret"), form.get("refresh_token")) != (
                "refresh_token", self.client_id, self.client_secret, self.refresh_token):
            return web.json_response({"status": "BAD_REFRESH_TOKEN"}, status=400)
        if self.token_answer is not None:
            return web.json_response(self.token_answer)
        # HubSpot's whole answer: the client library refuses one without refresh_token or token_type.
        return web.json_response({"access_token": self.access_token, "refresh_token": self.refresh_token,
                                  "token_type": "bearer", "expires_in": 1800})

    async def _contacts(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.access_token}":
            return web.json_response({"status": "error", "category": "INVALID_AUTHENTICATION"}, status=401)
        limit = int(request.query.get("limit", "10"))
        start = int(request.query.get("after", "0"))
        page = [{"archived": False, **c} for c in self.contacts[start:start + limit]]
        body: dict = {"results": page}
        if start + limit < len(self.contacts):
            body["paging"] = {"next": {"after": str(start + limit)}}
        if self.after_page is not None:
            self.after_page(start)
        return web.json_response(body)


async def serve(app: web.Application) -> TestServer:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")
