"""Idempotency-Key on POST /v1/events and /v1/events/batch: the header's rule, a request's claim, the answer
to a retry, and the job that ends the window. The key is claimed by the workspace actor in the transaction
that stores the request's events (actors/workspace.py, storage/idempotency.py)."""

from __future__ import annotations

import hashlib
import logging

import msgspec
from aiohttp import web

from app.appkeys import POOL
from app.responses import ApiError, invalid
from app.scheduler import Scheduler
from storage import idempotency as store
from storage.idempotency import Claim

log = logging.getLogger("tally.idempotency")

HEADER = "Idempotency-Key"
MAX_LENGTH = 255
# Each endpoint's name goes into a request's digest: a body both endpoints accept is still two requests.
SINGLE = b"POST /v1/events\n"
BATCH = b"POST /v1/events/batch\n"
REPLAYED = {"Idempotent-Replayed": "true"}  # on a retry's answer, as Stripe marks one

# Keys are remembered at least this long, as Segment's messageIds are (app/segment/upkeep.py): clients retry
# for minutes, and a replay of a day-old queue is still caught.
WINDOW_HOURS = 48
JOB = "idempotency_keys_prune"
JOB_SECONDS = 300.0
# A run deletes at most CHUNK * ROUNDS keys (500,000: 1,666 keyed requests a second with a key, sustained),
# CHUNK per statement, so neither a statement nor a run holds the job for long; the next run goes on.
CHUNK = 10_000
ROUNDS = 50


def idempotency_key(request: web.Request) -> str | None:
    """The request's Idempotency-Key, None without one, else the keyed API's 400 naming the header."""
    value = request.headers.get(HEADER)
    if value is None:
        return None
    problem = None
    if len(request.headers.getall(HEADER)) > 1:
        problem = "sent more than once"
    elif not value:
        problem = "must not be empty"
    elif len(value) > MAX_LENGTH:
        problem = f"longer than {MAX_LENGTH} characters"
    elif not (value.isascii() and value.isprintable()):
        problem = "must be printable ASCII characters"
    if problem:
        raise invalid(f"{HEADER}: {problem}", fields=[{"field": HEADER, "message": problem}])
    return value


def claim(endpoint: bytes, key: str, body: bytes, answer: dict) -> Claim:
    """The claim of a request: its key, the SHA-256 of its endpoint and body as received, and its answer."""
    return Claim(key, hashlib.sha256(endpoint + body).digest(), msgspec.json.encode(answer))


def respond(mine: Claim, earlier: Claim | None) -> web.Response:
    """The answer once the actor committed: this request's own when its key was new (`earlier` None), the
    first answer again to a retry, a 409 to another request under a key already used."""
    if earlier is None:
        return web.Response(body=mine.response, content_type="application/json")
    if earlier.request_sha256 != mine.request_sha256:
        raise ApiError(409, "idempotency_conflict",
                       f"this {HEADER} was already used with a different request; send a new key for a new "
                       "request (nothing was stored)")
    return web.Response(body=earlier.response, content_type="application/json", headers=REPLAYED)


def register(app: web.Application, scheduler: Scheduler) -> None:
    """JOB_REGISTRARS entry."""
    pool = app[POOL]

    async def prune() -> None:
        async with pool.acquire() as conn:
            deleted = await store.prune(conn, WINDOW_HOURS, chunk=CHUNK, rounds=ROUNDS)
        if deleted >= CHUNK * ROUNDS:
            log.warning("idempotency keys pruned keys=%d, the most one run deletes: more are left", deleted)
        elif deleted:
            log.info("idempotency keys pruned keys=%d", deleted)

    scheduler.every(JOB, JOB_SECONDS, prune)
