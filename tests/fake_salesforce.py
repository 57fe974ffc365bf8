"""A local stand-in for Salesforce's REST API (aiohttp on loopback): the OAuth refresh-token grant,
sobject describe, SOQL query with nextRecordsUrl paging, the Sforce-Limit-Info header and the
rate-limit answers (429 with Retry-After, 403 REQUEST_LIMIT_EXCEEDED).

Its SOQL reader understands the shapes the connector sends: a field list, one object, conditions
joined by AND (`F != null`, `(F = 'text')`, and the cursor condition), ORDER BY F ASC, Id ASC and LIMIT."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

API = "/services/data/v61.0"
QUERY = re.compile(r"^SELECT (?P<select>.+?) FROM (?P<object>\w+) WHERE (?P<where>.+) "
                   r"ORDER BY (?P<order>\w+) ASC, Id ASC(?: LIMIT (?P<limit>\d+))?$", re.S)
CURSOR = re.compile(r"^\((\w+) > (\S+) OR \(\1 = \2 AND Id > '(\w+)'\)\)$")


def sf_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class FakeSalesforce:
    access_token: str = "00Dxx0000001gPL!AQ4AQFakeAccessToken"
    client_id: str = "3MVG9fake.client.id"
    client_secret: str = "sf-client-Secret-5150"
    refresh_token: str = "5Aep861fakeRefreshToken"
    url: str = ""  # the instance URL handed out by the token endpoint; set once serving
    # object name -> {field name: field type}; object name -> records (dicts with Id and the fields)
    schemas: dict[str, dict[str, str]] = field(default_factory=dict)
    records: dict[str, list[dict]] = field(default_factory=dict)
    batch_size: int = 2000
    api_limit: int = 15000
    requests: int = 0
    busy_answers: int = 0  # answer this many query requests with 429 + Retry-After first
    limit_exceeded: bool = False  # answer every API request with 403 REQUEST_LIMIT_EXCEEDED
    exhaust_after: int | None = None  # ...once this many query pages have been served
    pages_served: int = 0
    soql: list[str] = field(default_factory=list)
    locators: dict[str, list[dict]] = field(default_factory=dict)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/services/oauth2/token", self.token)
        app.router.add_get(API + "/sobjects/{object}/describe", self.guarded(self.describe))
        app.router.add_get(API + "/query", self.guarded(self.query))
        app.router.add_get(API + "/query/", self.guarded(self.query))  # simple-salesforce's spelling
        app.router.add_get(API + "/query/{locator}", self.guarded(self.more))
        return app

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if (form.get("grant_type"), form.get("client_id"), form.get("client_secret"), form.get("refresh_token")) != (
                "refresh_token", self.client_id, self.client_secret, self.refresh_token):
            return web.json_response({"error": "invalid_grant", "error_description": "authentication failure"},
                                     status=400)
        return web.json_response({"access_token": self.access_token, "instance_url": self.url,
                                  "id": f"{self.url}/id/00Dxx/005xx", "token_type": "Bearer",
                                  "issued_at": "1700000000000", "signature": "c2ln"})

    def guarded(self, handler):
        async def handle(request: web.Request) -> web.Response:
            self.requests += 1
            headers = {"Sforce-Limit-Info": f"api-usage={self.requests}/{self.api_limit}"}
            if request.headers.get("Authorization") != f"Bearer {self.access_token}":
                return web.json_response([{"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}],
                                         status=401, headers=headers)
            if self.limit_exceeded or (self.exhaust_after is not None and self.pages_served >= self.exhaust_after):
                return web.json_response([{"message": "TotalRequests Limit exceeded.",
                                           "errorCode": "REQUEST_LIMIT_EXCEEDED"}], status=403, headers=headers)
            if self.busy_answers and handler in (self.query, self.more):
                self.busy_answers -= 1
                return web.json_response([{"message": "Too many requests", "errorCode": "REQUEST_LIMIT_EXCEEDED_TEMP"}],
                                         status=429, headers={**headers, "Retry-After": "0"})
            response = await handler(request)
            response.headers.update(headers)
            return response

        return handle

    async def describe(self, request: web.Request) -> web.Response:
        name = request.match_info["object"]
        schema = self.schemas.get(name)
        if schema is None:
            return web.json_response([{"errorCode": "NOT_FOUND", "message": "The requested resource does not exist"}],
                                     status=404)
        return web.json_response({"name": name, "queryable": True,
                                  "fields": [{"name": n, "type": t} for n, t in schema.items()]})

    async def query(self, request: web.Request) -> web.Response:
        soql = request.query.get("q", "")
        self.soql.append(soql)
        parsed = QUERY.match(soql)
        if parsed is None:
            return self._bad("MALFORMED_QUERY", f"unexpected SOQL: {soql}")
        name = parsed.group("object")
        schema = self.schemas.get(name)
        if schema is None:
            return self._bad("INVALID_TYPE", f"sObject type '{name}' is not supported.")
        select = [f.strip() for f in parsed.group("select").split(",")]
        for column in [*select, parsed.group("order")]:
            if column not in schema:
                return self._bad("INVALID_FIELD", f"No such column '{column}' on entity '{name}'.")
        rows = list(self.records.get(name, []))
        for condition in parsed.group("where").split(" AND ("):
            condition = condition if condition.startswith("(") or " != null" in condition else "(" + condition
            rows = self._filter(rows, condition.strip())
            if rows is None:
                return self._bad("MALFORMED_QUERY", f"unexpected condition {condition}")
        order = parsed.group("order")
        rows.sort(key=lambda r: (sf_time(r[order]), r["Id"]))
        if parsed.group("limit"):
            rows = rows[:int(parsed.group("limit"))]
        picked = [{"attributes": {"type": name, "url": f"{API}/sobjects/{name}/{r['Id']}"},
                   **{f: r.get(f) for f in select}} for r in rows]
        return self._page(picked, len(picked))

    def _filter(self, rows: list[dict], condition: str) -> list[dict] | None:
        if found := re.fullmatch(r"(\w+) != null", condition):
            return [r for r in rows if r.get(found.group(1)) is not None]
        if found := CURSOR.fullmatch(condition):
            column, at, last_id = found.group(1), sf_time(found.group(2)), found.group(3)
            return [r for r in rows if (sf_time(r[column]), r["Id"]) > (at, last_id)]
        if found := re.fullmatch(r"\(\((\w+) = '([^']*)'\)\)|\((\w+) = '([^']*)'\)", condition):
            column = found.group(1) or found.group(3)
            value = found.group(2) if found.group(1) else found.group(4)
            return [r for r in rows if r.get(column) == value]
        return None

    def _page(self, rows: list[dict], total: int) -> web.Response:
        self.pages_served += 1
        chunk, rest = rows[:self.batch_size], rows[self.batch_size:]
        body: dict[str, Any] = {"totalSize": total, "done": not rest, "records": chunk}
        if rest:
            locator = f"01gxx{secrets.token_hex(6)}-{self.batch_size}"
            self.locators[locator] = rest
            body["nextRecordsUrl"] = f"{API}/query/{locator}"
        return web.json_response(body)

    async def more(self, request: web.Request) -> web.Response:
        rest = self.locators.pop(request.match_info["locator"], None)
        if rest is None:
            return self._bad("INVALID_QUERY_LOCATOR", "invalid query locator", status=404)
        return self._page(rest, len(rest))

    @staticmethod
    def _bad(code: str, message: str, status: int = 400) -> web.Response:
        return web.json_response([{"message": message, "errorCode": code}], status=status)
