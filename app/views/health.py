"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.appkeys import METRICS, MIRROR, OUTAGES, POOL
from app.openapi import document
from app.responses import json_response
from common.outages import RETRY_AFTER_SECONDS


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready when PostgreSQL (the system of record) answers and ingestion is not in an outage it has seen (its
    latest flush failed as one, none committed since: a full disk answers SELECT 1 but refuses every event). The
    analytics mirror's lag is reported beside it; a lagging or failing store does not stop ingestion, so it does
    not make the process unready."""
    outage = request.config_dict[OUTAGES].ingestion_outage()
    if outage is not None:
        return json_response({"status": "unavailable", "database": outage}, 503,
                             {"Retry-After": str(RETRY_AFTER_SECONDS)})
    try:
        async with asyncio.timeout(2):
            async with request.config_dict[POOL].acquire() as conn:
                await conn.fetchval("SELECT 1")
            pending, lag = await request.config_dict[MIRROR].lag()
    except Exception as exc:  # any failure means "not ready"
        # As every 503 of the service: Retry-After says when to look again (a load balancer may use it).
        return json_response({"status": "unavailable", "database": type(exc).__name__}, 503,
                             {"Retry-After": str(RETRY_AFTER_SECONDS)})
    mirror = request.config_dict[MIRROR]
    analytics = {"pending": pending, "lag_seconds": round(lag, 3),
                 "status": "ok" if mirror.last_error is None else "failing"}
    return json_response({"status": "ok", "database": "ok", "analytics": analytics})


async def prometheus(request: web.Request) -> web.Response:
    with contextlib.suppress(Exception):  # refreshes the lag gauges; stale values beat a failed scrape
        async with asyncio.timeout(2):
            await request.config_dict[MIRROR].lag()
    body = generate_latest(request.config_dict[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    return json_response(document())
