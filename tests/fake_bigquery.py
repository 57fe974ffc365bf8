"""A local stand-in for the BigQuery REST endpoints google-cloud-bigquery calls (jobs.query,
jobs.get, jobs.getQueryResults) and for Google's OAuth token endpoint, on loopback.

Queries run on an in-memory DuckDB database whose schemas play the datasets; the token endpoint
verifies the service account's signed JWT against the key the test registered, as Google does."""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import duckdb
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def new_service_account(token_uri: str, project: str = "tally-test") -> tuple[dict, rsa.RSAPublicKey]:
    """A service account key file (as Google issues them) and the public half the fake verifies with."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    key = {
        "type": "service_account", "project_id": project, "private_key_id": secrets.token_hex(20),
        "private_key": pem, "client_email": f"importer@{project}.iam.gserviceaccount.com",
        "client_id": "1234567890", "token_uri": token_uri,
    }
    return key, private.public_key()


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


BQ_TYPES = {"BIGINT": "INTEGER", "INTEGER": "INTEGER", "HUGEINT": "INTEGER", "VARCHAR": "STRING",
            "DOUBLE": "FLOAT", "FLOAT": "FLOAT", "BOOLEAN": "BOOLEAN", "DATE": "DATE",
            "TIMESTAMP WITH TIME ZONE": "TIMESTAMP", "TIMESTAMP": "DATETIME"}


def _bq_type(duck: str) -> str:
    return "NUMERIC" if duck.startswith("DECIMAL") else BQ_TYPES.get(duck, "STRING")


def _cell(value: Any, kind: str, int64_ts: bool) -> Any:
    if value is None:
        return None
    if kind == "TIMESTAMP":
        micros = int(value.astimezone(UTC).timestamp() * 1_000_000)
        return str(micros) if int64_ts else str(micros / 1_000_000)
    if kind == "DATETIME":
        return value.isoformat()
    if kind == "BOOLEAN":
        return "true" if value else "false"
    return str(value)


def _param(p: dict) -> Any:
    kind, raw = p["parameterType"]["type"], p["parameterValue"].get("value")
    if raw is None:
        return None
    if kind == "INT64":
        return int(raw)
    if kind == "FLOAT64":
        return float(raw)
    if kind in ("NUMERIC", "BIGNUMERIC"):
        return Decimal(raw)
    if kind == "BOOL":
        return raw == "true"
    if kind == "TIMESTAMP":
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if kind == "DATETIME":
        return datetime.fromisoformat(raw)
    if kind == "DATE":
        return date.fromisoformat(raw)
    return raw


@dataclass
class FakeBigQuery:
    project: str = "tally-test"
    public_keys: list[rsa.RSAPublicKey] = field(default_factory=list)
    db: duckdb.DuckDBPyConnection = field(default_factory=lambda: duckdb.connect(":memory:"))
    tokens: set[str] = field(default_factory=set)
    token_requests: int = 0
    queries: list[dict] = field(default_factory=list)
    results: dict[str, tuple[list[dict], list[list]]] = field(default_factory=dict)
    unhandled: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def execute(self, sql: str, *args: Any) -> None:
        with self.lock:
            self.db.execute(sql, list(args) or None)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/token", self.token)
        app.router.add_post("/bigquery/v2/projects/{project}/queries", self.query)
        app.router.add_get("/bigquery/v2/projects/{project}/queries/{job}", self.query_results)
        app.router.add_get("/bigquery/v2/projects/{project}/jobs/{job}", self.get_job)
        app.router.add_route("*", "/{tail:.*}", self.other)
        return app

    # --- OAuth ---------------------------------------------------------------------------------------
    async def token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        form = await request.post()
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        try:
            header, claims, signature = str(form["assertion"]).split(".")
            signed, sig = f"{header}.{claims}".encode(), _b64(signature)
        except (KeyError, ValueError):
            return web.json_response({"error": "invalid_request"}, status=400)
        for key in self.public_keys:
            try:
                key.verify(sig, signed, padding.PKCS1v15(), hashes.SHA256())
            except InvalidSignature:
                continue
            token = "ya29." + secrets.token_urlsafe(24)
            self.tokens.add(token)
            assert "bigquery" in json.loads(_b64(claims))["scope"]
            return web.json_response({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
        return web.json_response({"error": "invalid_grant", "error_description": "Invalid JWT Signature."},
                                 status=400)

    def _authorized(self, request: web.Request) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        if auth.removeprefix("Bearer ") in self.tokens:
            return None
        return self._error(401, "Request had invalid authentication credentials.", "unauthorized", "UNAUTHENTICATED")

    @staticmethod
    def _error(code: int, message: str, reason: str, status: str) -> web.Response:
        return web.json_response({"error": {"code": code, "message": message, "status": status,
                                            "errors": [{"message": message, "domain": "global", "reason": reason}]}},
                                 status=code)

    # --- jobs ----------------------------------------------------------------------------------------
    async def query(self, request: web.Request) -> web.Response:
        if (denied := self._authorized(request)) is not None:
            return denied
        body = await request.json()
        self.queries.append(body)
        dataset = (body.get("defaultDataset") or {}).get("datasetId")
        sql = body["query"].replace("`", '"')
        args = [_param(p) for p in body.get("queryParameters", [])]
        with self.lock:
            try:
                cur = self.db.cursor()
                if dataset:
                    cur.execute(f"SET schema = '{dataset}'")
                if body.get("dryRun"):
                    cur.execute(f"SELECT * FROM ({sql}) LIMIT 0", args or None)
                else:
                    cur.execute(sql, args or None)
                fields = [{"name": d[0], "type": _bq_type(str(d[1])), "mode": "NULLABLE"} for d in cur.description]
                rows = [] if body.get("dryRun") else [list(r) for r in cur.fetchall()]
            except duckdb.CatalogException as exc:
                found = re.search(r"Table with name (\w+) does not exist", str(exc))
                name = found.group(1) if found else "?"
                return self._error(404, f"Not found: Table {self.project}:{dataset}.{name} was not found in "
                                   "location US", "notFound", "NOT_FOUND")
            except duckdb.Error as exc:
                return self._error(400, f"Syntax error: {str(exc).splitlines()[0]}", "invalidQuery",
                                   "INVALID_ARGUMENT")
        job = "job_" + secrets.token_hex(8)
        self.results[job] = (fields, rows)
        int64_ts = bool((body.get("formatOptions") or {}).get("useInt64Timestamp"))
        page = self._page(job, 0, body.get("maxResults"), int64_ts)
        if body.get("dryRun"):
            page.pop("rows", None)
            page.pop("pageToken", None)
        return web.json_response({"kind": "bigquery#queryResponse", **page})

    def _page(self, job: str, start: int, max_results: Any, int64_ts: bool) -> dict:
        fields, rows = self.results[job]
        size = int(max_results) if max_results else len(rows) or 1
        chunk = rows[start:start + size]
        answer = {
            "jobReference": {"projectId": self.project, "jobId": job, "location": "US"},
            "schema": {"fields": fields}, "totalRows": str(len(rows)), "jobComplete": True,
            "rows": [{"f": [{"v": _cell(v, f["type"], int64_ts)} for v, f in zip(row, fields, strict=True)]}
                     for row in chunk],
        }
        if start + size < len(rows):
            answer["pageToken"] = str(start + size)
        return answer

    async def query_results(self, request: web.Request) -> web.Response:
        if (denied := self._authorized(request)) is not None:
            return denied
        job, q = request.match_info["job"], request.query
        if job not in self.results:
            return self._error(404, f"Not found: Job {self.project}:US.{job}", "notFound", "NOT_FOUND")
        start = int(q.get("pageToken") or q.get("startIndex") or 0)
        int64_ts = q.get("formatOptions.useInt64Timestamp", "").lower() == "true"
        answer = self._page(job, start, q.get("maxResults"), int64_ts)
        return web.json_response({"kind": "bigquery#getQueryResultsResponse", **answer})

    async def get_job(self, request: web.Request) -> web.Response:
        if (denied := self._authorized(request)) is not None:
            return denied
        job = request.match_info["job"]
        return web.json_response({
            "kind": "bigquery#job", "id": f"{self.project}:US.{job}",
            "jobReference": {"projectId": self.project, "jobId": job, "location": "US"},
            "configuration": {"jobType": "QUERY", "query": {"query": "", "useLegacySql": False}},
            "status": {"state": "DONE"}, "statistics": {"creationTime": "1700000000000"},
        })

    async def other(self, request: web.Request) -> web.Response:
        self.unhandled.append(f"{request.method} {request.path}")
        return self._error(501, f"the fake does not implement {request.method} {request.path}", "notImplemented",
                           "UNIMPLEMENTED")
