"""Baseline: the least a JSON ingestion endpoint can do, in the same process type as `tally serve`:
aiohttp + uvloop, read the body, parse it with orjson, answer a small JSON."""

import sys

import orjson
import uvloop
from aiohttp import web

_ANSWER = orjson.dumps({"status": "received"})


async def hello(request: web.Request) -> web.Response:
    orjson.loads(await request.read())
    return web.Response(body=_ANSWER, content_type="application/json")


app = web.Application()
app.router.add_post("/{tail:.*}", hello)
uvloop.install()
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
