"""GET /tracker.js: the committed browser tracker build, cacheable and revalidated by a strong ETag.

The file is read once per process and kept with a gzip copy. Each encoding has its own ETag (a strong
validator names exact bytes). `/tracker.js?v=<etag hash>` is a versioned URL: it may be cached for a
year, as its content never changes under that URL.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from aiohttp import web

TRACKER_PATH = Path(__file__).resolve().parents[2] / "tracker_js" / "dist" / "tally.min.js"
CACHE_CONTROL = "public, max-age=86400"
CACHE_CONTROL_VERSIONED = "public, max-age=31536000, immutable"


@dataclass(frozen=True, slots=True)
class TrackerBuild:
    body: bytes
    gzipped: bytes
    version: str  # first 16 hex characters of the SHA-256 of the body

    @property
    def etag(self) -> str:
        return f'"{self.version}"'

    @property
    def etag_gzip(self) -> str:
        return f'"{self.version}-gz"'


@cache
def tracker_build(path: Path = TRACKER_PATH) -> TrackerBuild:
    body = path.read_bytes()
    return TrackerBuild(body, gzip.compress(body, 9, mtime=0), hashlib.sha256(body).hexdigest()[:16])


def etag_matches(header: str, etag: str) -> bool:
    """If-None-Match uses weak comparison (RFC 9110 13.1.2): W/"x" matches "x"; "*" matches anything."""
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def _accepts_gzip(request: web.Request) -> bool:
    for part in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() == "gzip" and params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00"):
            return True
    return False


async def tracker_js(request: web.Request) -> web.Response:
    build = tracker_build()
    gz = _accepts_gzip(request)
    etag = build.etag_gzip if gz else build.etag
    versioned = request.query.get("v") == build.version
    headers = {
        "ETag": etag,
        "Cache-Control": CACHE_CONTROL_VERSIONED if versioned else CACHE_CONTROL,
        "Vary": "Accept-Encoding",
        # Lets pages load it with crossorigin/SRI; the script itself holds nothing private.
        "Access-Control-Allow-Origin": "*",
        "X-Content-Type-Options": "nosniff",
    }
    if etag_matches(request.headers.get("If-None-Match", ""), etag):
        return web.Response(status=304, headers=headers)
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(
        body=build.gzipped if gz else build.body, headers=headers,
        content_type="application/javascript", charset="utf-8",
    )
