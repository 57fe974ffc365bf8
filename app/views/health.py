"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.appkeys import METRICS, POOL
from app.openapi import document
from app.responses import json_response


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        async with asyncio.timeout(2):
            async with request.config_dict[POOL].acquire() as conn:
                await conn.fetchval("SELECT 1")
    except Exception as exc:  # any failure means "not ready"
        return json_response({"status": "unavailable", "database": type(exc).__name__}, 503)
    return json_response({"status": "ok", "database": "ok"})


async def prometheus(request: web.Request) -> web.Response:
    body = generate_latest(request.config_dict[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    return json_response(document())
