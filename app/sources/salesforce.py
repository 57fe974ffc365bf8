"""Salesforce through simple-salesforce (its REST client, on a requests session the network policy
guards): records of a standard or custom object (options.table, e.g. `Opportunity` or `Invoice__c`) or of
a SOQL query (options.query) become events by the shared options model. Credentials are an access token
with the org's instance_url, or a connected app's client id/secret with a refresh token, exchanged at
login.salesforce.com (options.base_url: another login host, e.g. https://test.salesforce.com for a
sandbox) for a token and the org's instance; simple-salesforce has no refresh-token grant, so that one
POST is made here, on the same guarded session.

The library blocks (requests), so each call runs in a worker thread.

Incremental on SystemModstamp (or options.cursor_column, a date/time field): each sync asks for the
records changed after the last (cursor value, Id) stored, ordered by both, follows nextRecordsUrl page
by page and commits each page with its cursor, so a sync cut short resumes without gaps or repeats.

Rate limits: a 429/503 answer is retried after its Retry-After (a few times, briefly); an org whose
daily API allowance is used up (REQUEST_LIMIT_EXCEEDED), or nearly so by the Sforce-Limit-Info header,
stops the sync with the pages so far kept, and the next scheduled sync carries on.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import UTC
from typing import Any

import msgspec
import requests
from simple_salesforce import Salesforce
from simple_salesforce.exceptions import SalesforceError

from app.sources.base import Connector, SourceError, event_name, rows_to_batch, utc
from app.sources.netguard import DestinationRefused
from app.sources.schemas import SalesforceCredentials

LOGIN_URL = "https://login.salesforce.com"
VERSION = "61.0"
API = f"/services/data/v{VERSION}"
DEFAULT_CURSOR = "SystemModstamp"
RETRIES = 3
MAX_RETRY_WAIT = 30.0
# Stop once the org has used this share of its daily API requests: its other integrations need the rest.
USAGE_STOP = 0.9
# Compound and binary fields cannot be listed in a multi-record query (their parts can).
UNQUERYABLE = {"address", "location", "base64"}
RECORD_ID = re.compile(r"^[A-Za-z0-9]{15,18}\Z")
NEXT_RECORDS = re.compile(rf"^{re.escape(API)}/query/(?P<locator>[A-Za-z0-9-]+)$")
SOQL = re.compile(r"^\s*SELECT\s+(?P<select>.+?)\s+FROM\s+(?P<object>[A-Za-z][A-Za-z0-9_]*)"
                  r"(?:\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)
CLAUSES = re.compile(r"\b(ORDER\s+BY|LIMIT|OFFSET|GROUP\s+BY|HAVING|FOR\s+(VIEW|REFERENCE|UPDATE))\b", re.I)


class NotFound(SourceError):
    pass


def error_of(body: Any) -> tuple[str, str]:
    """(errorCode, message) of a Salesforce error answer (a list of errors, or an OAuth error object)."""
    first = body[0] if isinstance(body, list) and body else body
    if not isinstance(first, dict):
        return "", ""
    code = first.get("errorCode") or first.get("error") or ""
    # Capped: enough to act on, never a page of whatever a peer answered.
    return str(code)[:100], str(first.get("message") or first.get("error_description") or "")[:300]


def strip_attributes(record: dict) -> dict:
    """A record without Salesforce's `attributes` (type and URL), also in related records."""
    return {k: strip_attributes(v) if isinstance(v, dict) else v for k, v in record.items() if k != "attributes"}


def soql_literal(value: str, kind: str) -> str:
    """A cursor value from a record as a SOQL date or dateTime literal (never quoted text from outside)."""
    moment = utc(value)
    if moment is None:
        raise SourceError(f"the cursor field holds {value!r}, not a date or time")
    if kind == "date":
        return moment.date().isoformat()
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{moment.microsecond // 1000:03d}Z" if moment.microsecond else f"{text}Z"


class Org:
    """One org's REST API through simple-salesforce, on a session from the network policy (every
    connection checked, redirect hops included), honouring the org's rate-limit answers."""

    def __init__(self, session: requests.Session, token: str, instance: str, timeout: float) -> None:
        self.instance = instance.rstrip("/")
        self.timeout = timeout
        self.retry_after: str | None = None
        session.hooks["response"].append(self._answered)  # the library's errors keep no headers
        self.sf = Salesforce(instance_url=self.instance, session_id=token, session=session, version=VERSION,
                             object_pairs_hook=dict)
        # The library writes https://<host> URLs; an instance URL's own scheme is kept (a local fake's is http).
        self.sf.base_url = f"{self.instance}{API}/"

    def _answered(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self.retry_after = response.headers.get("Retry-After")

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        for attempt in range(RETRIES + 1):
            try:
                return await asyncio.to_thread(fn, *args, timeout=self.timeout)
            except SalesforceError as exc:
                wait = self._retry_wait(exc.status, attempt)
                if wait is None:
                    raise self._failure(exc) from None
            except requests.JSONDecodeError:
                raise SourceError("Salesforce answered with something other than JSON") from None
            except DestinationRefused:
                raise
            except (requests.RequestException, SourceError):  # SourceError: the policy found no address
                # One text for refused, reset and timed out: the reason would tell port states apart.
                raise SourceError(f"could not reach Salesforce at {self.instance}") from None
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def describe(self, name: str) -> dict:
        return await self.call(self.sf.restful, f"sobjects/{name}/describe") or {}

    async def query(self, soql: str) -> Any:
        return await self.call(self.sf.query, soql)

    async def more(self, next_url: str) -> Any:
        """The page a nextRecordsUrl names (matching NEXT_RECORDS), by its locator under this instance."""
        found = NEXT_RECORDS.match(next_url)
        assert found is not None
        return await self.call(self.sf.query_more, found.group("locator"))

    def _retry_wait(self, status: int, attempt: int) -> float | None:
        if status not in (429, 503) or attempt >= RETRIES:
            return None
        try:
            wait = float(self.retry_after or 2**attempt)
        except ValueError:
            wait = float(2**attempt)
        return wait if 0 <= wait <= MAX_RETRY_WAIT else None

    @staticmethod
    def _failure(exc: SalesforceError) -> SourceError:
        code, message = error_of(exc.content)
        if code == "REQUEST_LIMIT_EXCEEDED":
            return SourceError("Salesforce's API request limit for the org is used up (REQUEST_LIMIT_EXCEEDED); "
                               "the import carries on from where it stopped at the next scheduled sync")
        if exc.status == 401:
            return SourceError(f"Salesforce rejected the access token ({code or 'HTTP 401'})")
        if exc.status in (429, 503):
            return SourceError(f"Salesforce kept answering HTTP {exc.status} (busy); "
                               "the next scheduled sync tries again")
        detail = f" ({code}): {message}" if code or message else ""
        if exc.status == 404:
            return NotFound(f"Salesforce answered HTTP 404{detail}")
        return SourceError(f"Salesforce answered HTTP {exc.status}{detail}")

    @property
    def usage(self) -> tuple[int, int] | None:
        found = self.sf.api_usage.get("api-usage")
        return (found.used, found.total) if found else None

    def nearly_out(self) -> bool:
        usage = self.usage
        return usage is not None and usage[1] > 0 and usage[0] >= usage[1] * USAGE_STOP


class Plan(msgspec.Struct):
    """What one sync asks for: the SOQL without the cursor condition, the object, the cursor field."""

    object: str
    select: str
    where: str | None
    cursor_field: str
    cursor_kind: str  # "datetime" or "date"
    fields: dict[str, str]  # lower-case name -> API name, from the object's description


class SalesforceConnector(Connector):
    credentials: SalesforceCredentials

    def session(self) -> requests.Session:
        """Every connection to Salesforce (login host and the org's instance) is made on a session from
        here, which the network policy guards."""
        return self.guard.requests_session()

    async def _login(self, session: requests.Session) -> tuple[str, str]:
        """(access token, instance URL)."""
        c = self.credentials
        if c.access_token:
            assert c.instance_url is not None
            return c.access_token, c.instance_url
        login = (self.options.base_url or LOGIN_URL).rstrip("/")
        form = {"grant_type": "refresh_token", "client_id": c.client_id, "client_secret": c.client_secret,
                "refresh_token": c.refresh_token}
        try:
            answer = await asyncio.to_thread(session.post, f"{login}/services/oauth2/token", data=form,
                                             headers={"Accept": "application/json"}, timeout=self.timeout)
        except DestinationRefused:
            raise
        except (requests.RequestException, SourceError):  # SourceError: the policy found no address
            raise SourceError(f"could not reach Salesforce at {login}") from None
        try:
            body = answer.json()
        except ValueError:
            body = None
        fields = body if isinstance(body, dict) else {}
        token, instance = fields.get("access_token"), fields.get("instance_url")
        if answer.status_code >= 300 or not isinstance(token, str) or not isinstance(instance, str):
            code, message = error_of(body)
            detail = f": {code}" + (f" ({message})" if message else "") if code else f" (HTTP {answer.status_code})"
            raise SourceError(f"Salesforce refused the refresh token{detail}")
        if not re.match(r"^https?://[^\s/?#]+/?\Z", instance):
            raise SourceError("Salesforce's token answer named no usable instance_url")
        return token, instance

    async def _plan(self, org: Org) -> Plan:
        opts = self.options
        where = None
        if opts.query:
            parsed = SOQL.match(opts.query)
            if parsed is None or CLAUSES.search(parsed.group("where") or ""):
                raise SourceError("options.query must be SELECT <fields> FROM <object> [WHERE <conditions>], "
                                  "without ORDER BY, LIMIT, OFFSET or GROUP BY (Tally adds its own order)")
            name, select, where = parsed.group("object"), parsed.group("select"), parsed.group("where")
        elif opts.table:
            if "." in opts.table:
                raise SourceError("options.table is a Salesforce object name, such as Account or Invoice__c")
            name, select = opts.table, ""
        else:
            raise SourceError("options.table (a Salesforce object, such as Account) or options.query is needed")
        try:
            described = await org.describe(name)
        except NotFound:
            raise SourceError(f"Salesforce has no object {name} (or this user may not see it)") from None
        fields = {f["name"].lower(): f for f in described.get("fields", []) if isinstance(f, dict) and "name" in f}
        cursor = fields.get((opts.cursor_column or DEFAULT_CURSOR).lower())
        if cursor is None or cursor.get("type") not in ("datetime", "date"):
            raise SourceError(f"{name} has no date/time field {opts.cursor_column or DEFAULT_CURSOR} to sync by")
        wanted = [c for c in (opts.timestamp_column, opts.event_column, opts.user_id_column,
                              *(opts.properties or {}).values()) if c]
        for column in wanted:
            if column.lower() not in fields:
                raise SourceError(f"{name} has no field {column}")
        if not select:
            if opts.properties is not None:
                chosen = [fields[c.lower()]["name"] for c in wanted]
            else:
                chosen = [f["name"] for f in fields.values() if f.get("type") not in UNQUERYABLE]
            select = ", ".join(dict.fromkeys(["Id", cursor["name"], *chosen]))
        else:
            present = {p.strip().lower() for p in select.split(",")}
            extra = [f for f in ("Id", cursor["name"]) if f.lower() not in present]
            select = ", ".join([*extra, select])
        return Plan(object=described.get("name") or name, select=select, where=where, cursor_field=cursor["name"],
                    cursor_kind=cursor["type"], fields={k: f["name"] for k, f in fields.items()})

    def _soql(self, plan: Plan, mark: dict | None) -> str:
        conditions = [f"{plan.cursor_field} != null"]
        if plan.where:
            conditions.append(f"({plan.where})")
        if mark:
            if not RECORD_ID.match(str(mark.get("id", ""))):
                raise SourceError("the stored sync cursor is damaged; delete and reconnect the source")
            at = soql_literal(str(mark["t"]), plan.cursor_kind)
            conditions.append(f"({plan.cursor_field} > {at} OR ({plan.cursor_field} = {at} AND Id > '{mark['id']}'))")
        return (f"SELECT {plan.select} FROM {plan.object} WHERE {' AND '.join(conditions)} "
                f"ORDER BY {plan.cursor_field} ASC, Id ASC")

    async def check(self) -> None:
        with self.session() as session:
            token, instance = await self._login(session)
            org = Org(session, token, instance, self.timeout)
            plan = await self._plan(org)
            # Running the query for one record proves the SOQL (a custom query's fields and conditions).
            await org.query(self._soql(plan, None) + " LIMIT 1")

    async def sync(self, cursor: Any) -> tuple[int, Any]:
        total = 0
        with self.session() as session:
            token, instance = await self._login(session)
            org = Org(session, token, instance, self.timeout)
            plan = await self._plan(org)
            options = msgspec.structs.replace(self.options, cursor_column=plan.cursor_field)
            key = plan.fields.get
            default_name = event_name(plan.object, "salesforce_record")
            page = await org.query(self._soql(plan, cursor))
            while True:
                records = [strip_attributes(r) for r in page.get("records", []) if isinstance(r, dict)]
                if records:
                    last = records[-1]
                    cursor = {"t": str(last[plan.cursor_field]), "id": str(last["Id"])}
                    await self.sink.commit(rows_to_batch(records, options, default_name=default_name, cursor=cursor,
                                                         key=lambda c: key(c.lower(), c)))
                    total += len(records)
                next_url = page.get("nextRecordsUrl")
                if page.get("done", True) or not isinstance(next_url, str) or not NEXT_RECORDS.match(next_url):
                    break
                if org.nearly_out():
                    used, limit = org.usage or (0, 0)
                    raise SourceError(f"stopped at {used} of the org's {limit} daily Salesforce API requests, to "
                                      "leave the rest to its other integrations; the next scheduled sync carries on")
                page = await org.more(next_url)
        return total, cursor
